/**
 * Test helper: a `confirm` tool that opens a pi dialog (ctx.ui.confirm). The fake model
 * calls it for a scenario's `dialog` step; a roost job answers it with `roost reply`.
 */
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";

export default function (pi: ExtensionAPI) {
	pi.registerTool({
		name: "confirm",
		label: "confirm",
		description: "Ask the user to confirm something.",
		parameters: { type: "object", properties: { question: { type: "string" } }, required: ["question"] } as any,
		async execute(_id, params: any, _signal, _onUpdate, ctx) {
			const ok = await ctx.ui.confirm("Confirm", String(params.question));
			return { content: [{ type: "text", text: ok ? "confirmed" : "declined" }], details: {} };
		},
	});
}
