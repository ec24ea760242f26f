/**
 * Test helper: a `choose` tool that opens a pi select dialog (ctx.ui.select) with the
 * options the model gives; its result is the option pi got back, exactly, or "cancelled".
 */
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";

export default function (pi: ExtensionAPI) {
	pi.registerTool({
		name: "choose",
		label: "choose",
		description: "Ask the user to choose one of some options.",
		parameters: { type: "object", properties: { question: { type: "string" }, options: { type: "array", items: { type: "string" } } }, required: ["question", "options"] } as any,
		async execute(_id, params: any, _signal, _onUpdate, ctx) {
			const picked = await ctx.ui.select(String(params.question), (params.options ?? []).map(String));
			return { content: [{ type: "text", text: picked === undefined ? "cancelled" : `picked <${picked}>` }], details: {} };
		},
	});
}
