/**
 * Where roost's pi extension was before it moved to roost_plugins/pi: the path that
 * `roost pi install` wrote into pi's settings.json then. A foreground pi whose settings
 * still name this file gets the extension from its new home (`roost pi install` replaces
 * the entry with that path). A background job loads the extension itself (`-e`, the new
 * path), whichever of the two pi loads first: here it does nothing, so the extension is
 * not loaded twice.
 */
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";
import roost from "../../roost_plugins/pi/roost-extension.ts";

export default async function roostFromTheOldPath(pi: ExtensionAPI) {
	// A job's: the variable until the extension has read it, its process state after.
	if (process.env.ROOST_PI_BRIDGE || (globalThis as any).__roostPiState?.bridge) return;
	return roost(pi);
}
