// roost's OpenCode plugin (docs/hosts.md, "OpenCode"): hands agent items to the model
// mid-turn, appended to the result of the tool call that just ended.
//
// In a roost job, ROOST_OPENCODE_BRIDGE names the worker's private socket (0600, and only
// this OpenCode process and its children are served). After each tool call the plugin
// asks it what waits; the answer's text starts with roost's marker line, "[roost seq N]",
// and is pushed onto the tool's result, which OpenCode stores and sends with the next
// model call. Without the variable (OpenCode not run by roost) the plugin does nothing.
// It never fails a tool: no answer in time, or any error, adds nothing.
import { connect } from "node:net";

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

export const RoostPlugin = async () => {
  const bridge = process.env.ROOST_OPENCODE_BRIDGE;
  if (!bridge) return {};
  return {
    "tool.execute.after": async (input, output) => {
      const frame = { id: 1, op: "hook", event: "tool.execute.after", input: { sessionID: input.sessionID, callID: input.callID, tool: input.tool } };
      const answer = await ask(bridge, frame);
      const text = answer && answer.ok && answer.result ? answer.result.text : null;
      if (!text) return;
      // An MCP tool's result is {content, structuredContent, isError}; a built-in tool's is
      // {title, output, metadata}. OpenCode joins an MCP result's texts with a blank line.
      if (output && Array.isArray(output.content)) output.content.push({ type: "text", text });
      else if (output && typeof output.output === "string") output.output += "\n\n" + text;
    },
  };
};
