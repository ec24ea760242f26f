// An OpenCode plugin for the agent-CLI tests (opencodekit copies it into
// $XDG_CONFIG_HOME/opencode/plugins/): logs the hooks it sees and pushes text back.
//
//   ROOST_TEST_HOOK_LOG   a JSONL file: one line per hook call
//   ROOST_TEST_AFTER_TOOL text added to an MCP tool's result (tool.execute.after: mid-turn)
//   ROOST_TEST_TRANSFORM  text added to the last user message before every model call
//                         (experimental.chat.messages.transform)
//   ROOST_TEST_ON_IDLE    text sent as a new user message when the session goes idle
//                         (event session.idle -> client.session.prompt), once
import { appendFileSync } from "node:fs";

export const RoostTestPlugin = async ({ client }) => {
  const log = (record) => {
    if (process.env.ROOST_TEST_HOOK_LOG) appendFileSync(process.env.ROOST_TEST_HOOK_LOG, JSON.stringify(record) + "\n");
  };
  let idleSent = false;
  return {
    "tool.execute.after": async (input, output) => {
      log({ hook: "tool.execute.after", tool: input.tool, sessionID: input.sessionID, callID: input.callID, output_keys: Object.keys(output || {}) });
      const text = process.env.ROOST_TEST_AFTER_TOOL;
      if (text && Array.isArray(output?.content)) output.content.push({ type: "text", text });
      else if (text && typeof output?.output === "string") output.output += "\n" + text;
    },
    "experimental.chat.messages.transform": async (_input, output) => {
      log({ hook: "experimental.chat.messages.transform", messages: output.messages.length });
      const text = process.env.ROOST_TEST_TRANSFORM;
      const users = output.messages.filter((m) => m.info.role === "user");
      const last = users[users.length - 1];
      if (text && last) last.parts.push({ ...last.parts[0], id: last.parts[0].id + "x", type: "text", text, synthetic: true });
    },
    event: async ({ event }) => {
      if (event.type !== "session.idle") return;
      log({ hook: "event", type: event.type, sessionID: event.properties.sessionID });
      const text = process.env.ROOST_TEST_ON_IDLE;
      if (!text || idleSent) return;
      idleSent = true;
      await client.session.prompt({ path: { id: event.properties.sessionID }, body: { parts: [{ type: "text", text }] } });
    },
  };
};
