// roost's OpenCode plugin (docs/hosts.md, "OpenCode"): hands agent items to the model
// mid-turn, appended to the result of the tool call that just ended.
//
// In a roost job, ROOST_OPENCODE_BRIDGE names the worker's private socket (0600, and only
// this OpenCode process and its children are served). After each tool call the plugin
// asks it what waits; the answer's text starts with roost's marker line, "[roost seq N]",
// and is pushed onto the tool's result, which OpenCode stores and sends with the next
// model call. It also gives the agent's shell commands the user's own XDG_CONFIG_HOME
// (ROOST_OPENCODE_USER_CONFIG_HOME) where the job's OpenCode runs with roost's.
//
// In a user's own OpenCode, `roost opencode install` writes a copy of this file into
// OpenCode's plugins folder with HOOK set to its `roost opencode hook PostToolUse`
// command: after each tool call the plugin runs it, and it asks the session's `roost mcp`
// server (started by this OpenCode) what waits, as Claude Code's PostToolUse hook does.
// It never fails a tool: no answer in time, or any error, adds nothing.
import { spawn } from "node:child_process";
import { connect } from "node:net";

// The hook command (an argv) in an installed copy; null in the file a job loads.
const HOOK = null;
const ANSWER_WAIT_MS = 20000;

function ask(path, frame) {
  return new Promise((resolve) => {
    let buffer = "";
    let done = false;
    const socket = connect(path);
    const finish = (value) => {
      if (done) return;
      done = true;
      socket.destroy();
      resolve(value);
    };
    socket.setEncoding("utf8");
    socket.setTimeout(ANSWER_WAIT_MS, () => finish(null));
    socket.on("connect", () => socket.write(JSON.stringify(frame) + "\n"));
    socket.on("data", (data) => {
      buffer += data;
      const end = buffer.indexOf("\n");
      if (end < 0) return;
      try {
        finish(JSON.parse(buffer.slice(0, end)));
      } catch {
        finish(null);
      }
    });
    socket.on("error", () => finish(null));
    socket.on("close", () => finish(null));
  });
}

// The text a foreground hook hands over (its PostToolUse additionalContext), or null.
function runHook(input) {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn(HOOK[0], HOOK.slice(1), { stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      resolve(null);
      return;
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), ANSWER_WAIT_MS);
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (data) => (out += data));
    child.on("error", () => resolve(null));
    child.on("close", () => {
      clearTimeout(timer);
      try {
        const answer = JSON.parse(out);
        resolve((answer.hookSpecificOutput && answer.hookSpecificOutput.additionalContext) || null);
      } catch {
        resolve(null);
      }
    });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(input));
  });
}

function append(output, text) {
  // An MCP tool's result is {content, structuredContent, isError}; a built-in tool's is
  // {title, output, metadata}. OpenCode joins an MCP result's texts with a blank line.
  if (output && Array.isArray(output.content)) output.content.push({ type: "text", text });
  else if (output && typeof output.output === "string") output.output += "\n\n" + text;
}

export const RoostPlugin = async () => {
  const bridge = process.env.ROOST_OPENCODE_BRIDGE;
  if (!bridge) {
    if (!HOOK) return {};
    return {
      "tool.execute.after": async (input, output) => {
        const text = await runHook({ hook_event_name: "PostToolUse", tool_name: input.tool });
        if (text) append(output, text);
      },
    };
  }
  // A job loads roost's own file; an installed copy leaves the job to it.
  if (HOOK) return {};
  // A job's OpenCode runs with a config home of roost's (it links the user's entries):
  // the agent's shell commands get the user's own back, so what they write lands there.
  const userConfigHome = process.env.ROOST_OPENCODE_USER_CONFIG_HOME;
  return {
    "shell.env": async (input, output) => {
      if (userConfigHome) output.env.XDG_CONFIG_HOME = userConfigHome;
    },
    "tool.execute.after": async (input, output) => {
      const frame = { id: 1, op: "hook", event: "tool.execute.after", input: { sessionID: input.sessionID, callID: input.callID, tool: input.tool } };
      const answer = await ask(bridge, frame);
      const text = answer && answer.ok && answer.result ? answer.result.text : null;
      if (text) append(output, text);
    },
  };
};
