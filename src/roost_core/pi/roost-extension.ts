/**
 * roost for pi: a thin bridge between a pi session and the roost daemon.
 *
 * Two modes, chosen by the environment:
 *
 * - **Foreground** (an interactive pi with a UI): the session becomes a roost peer lazily,
 *   on its first roost_* tool call, and from then on keeps one daemon connection open. It
 *   takes the writer lock of its session file (`<file>.lock`, {pid, createTime} as roost
 *   reads this process's start time: `roost pi start-time PID`), registers with `peer_register`, marks the session file as a roost
 *   session (a `pi-roost-peer` custom entry), re-registers on every session_start, injects
 *   `deliver` events as `pi-roost-agent-message` steer messages and acks each one after its
 *   message_end. A session roost has been part of before registers at once on every later
 *   session_start (startup, resume, fork, reload), so what is held for it (a child's
 *   report) arrives without a tool call; any other session holds no daemon connection.
 *   **Attached** (`ROOST_ATTACH_TOKEN` set by `roost attach`): the same, but the session is a
 *   background job's, opened here by the user; it registers at once with the token, and the
 *   daemon binds it to the job (same id, queue, relations). The job's items come as
 *   `deliver` events as above (a user reply as a user message tagged with its seq, as the
 *   bridge tags one), and each run that took any in hands back to the job's parent
 *   (`handback`), as the job's worker would.
 * - **Bridge** (`ROOST_PI_BRIDGE` set: a background job run by a roost worker): it talks
 *   only to its own worker over that private Unix socket. The worker holds the job's
 *   authenticated daemon connection; this process never sees the job token.
 *
 * Policy never lives here: tool names, descriptions and parameters come from the daemon
 * (`tools` / the worker's hello), tool calls go through `tool_call`, and the framed text
 * of agent messages is built by the daemon. One file, no npm dependencies.
 */

import type { ExtensionAPI, ExtensionContext } from "@mariozechner/pi-coding-agent";
import { Box, Text } from "@mariozechner/pi-tui";
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { randomUUID } from "node:crypto";

const MESSAGE_TYPE = "pi-roost-agent-message";
/** A custom entry that records a queue seq that has no message of its own (a dialog answer). */
const SEQ_ENTRY = "pi-roost-seq";
/** A custom entry a foreground session gets when it first becomes a roost peer. */
const PEER_ENTRY = "pi-roost-peer";
const STATUS_KEY = "roost";
/** The footer entry that says a background session of this tree waits for the user. */
const DIALOG_STATUS_KEY = "roost-dialog";
const SOCKET_TIMEOUT_MS = 30_000;
/** How long a tool call is asked again (with its key) while no daemon answers. */
const REASK_MS = 60_000;
/** The protocol's frame limit (docs/protocol.md): the daemon discards a longer line and
 * answers it with no id, so a request that long is refused here, before it is written. */
const MAX_FRAME = 1024 * 1024;

type Json = Record<string, any>;

interface ToolDef {
	name: string;
	description: string;
	parameters: Json;
}

interface Item {
	seq: number;
	kind: string;
	content: string;
	from?: string | null;
	fromName?: string | null;
	relation?: string | null;
	trace?: string | null;
	hops?: number;
	id?: string | null;
	replyTo?: string | null;
	replyQuote?: string | null;
	scope?: string | null;
	/** "steer" (before the next model call) or "followUp" (after the current run). */
	delivery?: string | null;
}

// ------------------------------------------------------------------------------ wire

/** One newline-delimited JSON connection: requests {id, op}, answers {id, ok}, events {event}. */
class Link {
	private buffer = "";
	private nextId = 1;
	private waiting = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
	closed = false;
	onRequest?: (frame: Json) => Promise<Json | undefined>;
	onEvent?: (frame: Json) => void;
	onClose?: () => void;
	onBadFrame?: (reason: string) => void;

	private constructor(private socket: net.Socket) {
		socket.setEncoding("utf8");
		socket.on("data", (chunk: string) => this.feed(chunk));
		socket.on("error", () => this.shut());
		socket.on("close", () => this.shut());
	}

	static connect(socketPath: string): Promise<Link> {
		return new Promise((resolve, reject) => {
			const socket = net.createConnection(socketPath);
			const fail = (err: Error) => reject(err);
			socket.once("error", fail);
			socket.once("connect", () => {
				socket.off("error", fail);
				resolve(new Link(socket));
			});
		});
	}

	private feed(chunk: string): void {
		this.buffer += chunk;
		let index: number;
		// Split on "\n" only: U+2028/U+2029 are valid inside JSON strings.
		while ((index = this.buffer.indexOf("\n")) >= 0) {
			const line = this.buffer.slice(0, index);
			this.buffer = this.buffer.slice(index + 1);
			if (!line.trim()) continue;
			let frame: Json;
			try {
				frame = JSON.parse(line);
			} catch (err) {
				// The daemon writes only JSON: a frame that is not is lost, and says so.
				this.onBadFrame?.(`a frame from the roost daemon could not be read and is lost (${line.length} characters): ${errorText(err)}`);
				continue;
			}
			this.dispatch(frame);
		}
	}

	private dispatch(frame: Json): void {
		if (typeof frame.event === "string") {
			this.onEvent?.(frame);
			return;
		}
		if (typeof frame.op === "string") {
			const handler = this.onRequest;
			void (async () => {
				try {
					const result = handler ? await handler(frame) : undefined;
					this.write({ id: frame.id, ok: true, result: result ?? {} });
				} catch (err) {
					this.write({ id: frame.id, ok: false, error: { code: "internal", message: errorText(err) } });
				}
			})();
			return;
		}
		const waiter = this.waiting.get(frame.id);
		if (!waiter) return;
		this.waiting.delete(frame.id);
		if (frame.ok) waiter.resolve(frame.result ?? {});
		else waiter.reject(new Error(`${frame.error?.code ?? "error"}: ${frame.error?.message ?? "failed"}`));
	}

	private write(frame: Json): void {
		if (!this.closed) this.socket.write(`${JSON.stringify(frame)}\n`);
	}

	call(op: string, args: Json = {}): Promise<Json> {
		if (this.closed) return Promise.reject(new Error("roost: connection closed"));
		const id = this.nextId++;
		const line = JSON.stringify({ id, op, ...args });
		const size = Buffer.byteLength(line, "utf8");
		if (size > MAX_FRAME) {
			return Promise.reject(new Error(`frame_too_large: request is too large: ${size} bytes as JSON, a frame holds at most ${MAX_FRAME}; nothing was sent`));
		}
		return new Promise((resolve, reject) => {
			this.waiting.set(id, { resolve, reject });
			if (!this.closed) this.socket.write(`${line}\n`);
		});
	}

	/** A request whose answer nobody waits for. */
	notify(op: string, args: Json = {}): void {
		this.write({ id: this.nextId++, op, ...args });
	}

	private shut(): void {
		if (this.closed) return;
		this.closed = true;
		for (const waiter of this.waiting.values()) waiter.reject(new Error("roost: connection lost"));
		this.waiting.clear();
		this.onClose?.();
	}

	close(): void {
		this.socket.end();
		this.socket.destroy();
		this.shut();
	}
}

/** The daemon connection died (or none could be made): a keyed call may be asked again. */
function isConnectionLoss(err: unknown): boolean {
	const code = (err as any)?.code;
	if (["ECONNREFUSED", "ENOENT", "EPIPE", "ECONNRESET"].includes(code)) return true;
	return /^roost: (connection (lost|closed)|no daemon)/.test(errorText(err));
}

function errorText(err: unknown): string {
	return err instanceof Error ? err.message : String(err);
}

/** ``text`` safe to draw on the terminal, as roost's CLI draws names (roost_core.names.shown):
 * a job's name is kept as typed, so its controls, bidi and invisible format characters and
 * its line or paragraph separators are drawn as escapes (``\t``, ``\x1b``, ``\u202e``). */
/**
 * The footer line for the tree's sessions that wait on a dialog (the `dialogs` event), or
 * undefined when none does: one names its question, options and the command that answers.
 */
function dialogStatus(waiting: Json[]): string | undefined {
	if (waiting.length === 0) return undefined;
	if (waiting.length > 1) {
		return `⚠ ${waiting.length} background sessions wait for you: ${waiting.map((w) => shown(String(w.name))).join(", ")} — /roost-answer, or roost answer ID`;
	}
	const w = waiting[0];
	let question = String(w.question ?? "").replace(/\s+/g, " ").trim();
	if (question.length > 80) question = `${question.slice(0, 79)}…`;
	const options = Array.isArray(w.options) && w.options.length ? ` [${w.options.map(String).join(" / ")}]` : "";
	return `⚠ ${shown(String(w.name))} waits for you: ${shown(question)}${options} — /roost-answer, or roost answer ${w.id}${options ? " CHOICE" : " TEXT"}`;
}

function shown(text: string): string {
	return text.replace(/[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/gu, (ch) => {
		const short: Record<string, string> = { "\t": "\\t", "\n": "\\n", "\r": "\\r" };
		if (short[ch]) return short[ch];
		const code = ch.codePointAt(0) ?? 0;
		if (code < 0x100) return `\\x${code.toString(16).padStart(2, "0")}`;
		if (code < 0x10000) return `\\u${code.toString(16).padStart(4, "0")}`;
		return `\\U${code.toString(16).padStart(8, "0")}`;
	});
}

// ------------------------------------------------------------------------------ locks

/**
 * When process `pid` started, as roost's writer locks record it (psutil's create time, read
 * by roost's platform module: /proc on Linux, the kernel's process table on macOS and the
 * BSDs), from `roost pi start-time PID`. node has no portable way to read it, and asking
 * roost makes this extension and roost's Python agree on every platform. null when it
 * cannot be had (no such process, no roost to ask): a lock then names its pid alone.
 */
function startTime(pid: number): Promise<number | null> {
	const roost = process.env.ROOST_BIN || "roost";
	return new Promise((resolve) => {
		execFile(roost, ["pi", "start-time", String(pid)], { timeout: SOCKET_TIMEOUT_MS }, (err, stdout) => {
			const value = err ? Number.NaN : Number(String(stdout).trim());
			resolve(Number.isFinite(value) ? value : null);
		});
	});
}

/** This process's start time, asked once per pi process (see startTime). */
function ownStartTime(): Promise<number | null> {
	processState.startTime ??= startTime(process.pid);
	return processState.startTime;
}

async function isAlive(pid: unknown, expected: unknown): Promise<boolean> {
	if (typeof pid !== "number" || pid <= 0) return false;
	try {
		process.kill(pid, 0);
	} catch (err: any) {
		if (err?.code !== "EPERM") return false;
	}
	if (typeof expected !== "number") return true;
	const actual = await startTime(pid);
	return actual !== null && Math.abs(actual - expected) < 0.01;
}

function readLock(sessionFile: string): Json | null {
	try {
		const data = JSON.parse(fs.readFileSync(`${sessionFile}.lock`, "utf8"));
		return data && typeof data === "object" ? data : null;
	} catch {
		return null;
	}
}

/** The pid of another live process holding the session's writer lock, if any. */
async function otherHolder(sessionFile: string): Promise<number | null> {
	const lock = readLock(sessionFile);
	if (!lock || lock.pid === process.pid) return null;
	return (await isAlive(lock.pid, lock.createTime)) ? lock.pid : null;
}

async function takeLock(sessionFile: string): Promise<void> {
	const holder = await otherHolder(sessionFile);
	if (holder !== null) throw new Error(`roost: ${sessionFile} is held by pid ${holder}`);
	fs.mkdirSync(path.dirname(sessionFile), { recursive: true });
	const lockPath = `${sessionFile}.lock`;
	const tmp = `${lockPath}.${process.pid}.tmp`;
	const createTime = await ownStartTime();
	fs.writeFileSync(tmp, JSON.stringify({ pid: process.pid, createTime }), { mode: 0o600 });
	fs.renameSync(tmp, lockPath);
}

function releaseLock(sessionFile: string): void {
	if (readLock(sessionFile)?.pid !== process.pid) return;
	try {
		fs.unlinkSync(`${sessionFile}.lock`);
	} catch {
		// already gone
	}
}

// ------------------------------------------------------------------------------ daemon socket

/** The daemon's socket: $ROOST_SOCKET, or what `roost daemon socket` prints (it starts the daemon). */
function daemonSocket(): Promise<string> {
	if (process.env.ROOST_SOCKET) return Promise.resolve(process.env.ROOST_SOCKET);
	const roost = process.env.ROOST_BIN || "roost";
	return new Promise((resolve, reject) => {
		execFile(roost, ["daemon", "socket"], { timeout: SOCKET_TIMEOUT_MS }, (err, stdout, stderr) => {
			const socketPath = String(stdout).trim().split("\n").pop() ?? "";
			if (err || !socketPath) reject(new Error(`roost: '${roost} daemon socket' failed: ${String(stderr).trim() || errorText(err)}`));
			else resolve(socketPath);
		});
	});
}

/**
 * A connection to the daemon. The socket path found once is kept for this process (so a
 * later connection does not start a Python process again); when it no longer answers,
 * it is looked up afresh (which starts a daemon that has gone away).
 */
async function connectDaemon(): Promise<Link> {
	const known = processState.socket;
	if (known) {
		try {
			return await Link.connect(known);
		} catch {
			processState.socket = undefined;
		}
	}
	const socketPath = await daemonSocket();
	const link = await Link.connect(socketPath);
	processState.socket = socketPath;
	return link;
}

/**
 * Whether roost has been part of this session before: it was a foreground peer (the
 * marker entry), or it holds roost's entries from a background job (agent items, queue
 * seqs on user messages or dialog answers). All entries of the file count, not only the
 * current branch: the file is the routing key children report to.
 */
function roostSession(entries: readonly unknown[]): boolean {
	return entries.some((raw) => {
		const entry = raw as Json;
		if (entry.type === "custom") return entry.customType === PEER_ENTRY || entry.customType === SEQ_ENTRY;
		if (entry.type === "custom_message") return entry.customType === MESSAGE_TYPE;
		return entry.type === "message" && entry.message?.roost != null;
	});
}

/**
 * The queue seqs of the agent items a model request holds that the request before it did
 * not: the roost messages after its last assistant message (an item arrives as a steer
 * after a tool result, or starts a turn after the last answer). What `seen` tells the
 * daemon: the receiving model had them in a request (their senders' receipts say seen).
 */
function newAgentSeqs(messages: readonly unknown[]): number[] {
	const seqs: number[] = [];
	for (let index = messages.length - 1; index >= 0; index--) {
		const message = messages[index] as Json;
		if (message?.role === "assistant") break;
		const seq = message?.details?.seq;
		if (message?.role === "custom" && message.customType === MESSAGE_TYPE && Number.isInteger(seq) && seq >= 0) seqs.push(seq);
	}
	return seqs.reverse();
}

function hasPeerMarker(entries: readonly unknown[]): boolean {
	return entries.some((raw) => (raw as Json).type === "custom" && (raw as Json).customType === PEER_ENTRY);
}

// ------------------------------------------------------------------------------ the extension

/**
 * Process-wide (extensions are loaded afresh for every session of one pi process):
 * `wanted` once any session of this pi has become a peer (every later session_start then
 * registers), and the daemon socket once found.
 */
const processState: { wanted: boolean; socket?: string; startTime?: Promise<number | null>; bridge?: string; attach?: string } = ((globalThis as any).__roostPiState ??= { wanted: false });

export default async function roost(pi: ExtensionAPI) {
	// Kept for the process: a background pi switched to another session (a warm pi taking
	// a waking job's session file) loads this extension again, and it talks to the worker.
	if (process.env.ROOST_PI_BRIDGE) processState.bridge = process.env.ROOST_PI_BRIDGE;
	const bridgePath = processState.bridge;
	// Tools and scripts this pi starts must not find the worker's private channel.
	delete process.env.ROOST_PI_BRIDGE;
	// Nor `roost attach`'s token: only this session registers with it.
	if (process.env.ROOST_ATTACH_TOKEN) processState.attach = process.env.ROOST_ATTACH_TOKEN;
	const attachToken: string | undefined = processState.attach;
	delete process.env.ROOST_ATTACH_TOKEN;
	const registered = new Set<string>();
	let ctxRef: ExtensionContext | undefined;
	/** The no-user-authority notice every agent item ends with, as the worker (bridge hello)
	 * or the daemon (`tools`) gives it; null until then (nothing is changed). */
	let notice: string | null = null;

	// Agent messages that reach the model side by side carry the notice once: the request
	// (never the session file) drops it from each but the last of a run.
	pi.on("context", (event) => {
		const messages = notice ? oneNotice(event.messages as Json[], notice) : null;
		return messages ? { messages: messages as any } : undefined;
	});

	// ---------------------------------------------------------------- shared pieces

	function registerTools(defs: ToolDef[], call: (def: ToolDef, args: Json, ctx: ExtensionContext) => Promise<Json>): void {
		for (const def of defs) {
			if (registered.has(def.name)) continue;
			registered.add(def.name);
			pi.registerTool({
				name: def.name,
				label: def.name,
				description: def.description,
				parameters: def.parameters as any,
				async execute(_toolCallId, params, _signal, _onUpdate, ctx) {
					const result = await call(def, withSessionDefaults(def, (params ?? {}) as Json, ctx), ctx);
					if (!result.ok) throw new Error(String(result.text ?? "roost tool failed"));
					return { content: [{ type: "text", text: String(result.text ?? "") }], details: result.data ?? {} };
				},
			});
		}
	}

	/** A `model`/`thinking` parameter the model left out defaults to this session's own. */
	function withSessionDefaults(def: ToolDef, args: Json, ctx: ExtensionContext): Json {
		const props = def.parameters?.properties ?? {};
		const out = { ...args };
		if ("model" in props && out.model == null && ctx.model) out.model = `${ctx.model.provider}/${ctx.model.id}`;
		if ("thinking" in props && out.thinking == null) {
			const level = pi.getThinkingLevel?.();
			if (level) out.thinking = level;
		}
		return out;
	}

	/** An agent item into the session: a steer (or, for an idle pi, the start of a turn);
	 * `quiet`: only appended (an idle pi's batch, before the item that starts the turn). */
	function inject(item: Item, quiet = false): void {
		pi.sendMessage(
			{
				customType: MESSAGE_TYPE,
				content: item.content,
				display: true,
				details: {
					seq: item.seq,
					from: item.from ?? null,
					fromName: item.fromName ?? null,
					relation: item.relation ?? null,
					kind: item.kind,
					trace: item.trace ?? null,
					hops: item.hops ?? 0,
					// Only what it has: the message id, the id it answers, its broadcast scope.
					...(item.id ? { id: item.id } : {}),
					...(item.replyTo ? { replyTo: item.replyTo } : {}),
					...(item.replyQuote ? { replyQuote: item.replyQuote } : {}),
					...(item.scope ? { scope: item.scope } : {}),
				},
			},
			// The daemon decided the mode (roost_decide_delivery); a background worker
			// holds follow-ups itself, so only a foreground session ever gets one here.
			quiet ? { triggerTurn: false } : { triggerTurn: true, deliverAs: item.delivery === "followUp" ? "followUp" : "steer" },
		);
	}

	pi.registerMessageRenderer(MESSAGE_TYPE, (message, options, theme) => {
		const details = (message.details ?? {}) as Json;
		const who = shown(String(details.fromName || details.from || "agent"));
		const reply = details.replyTo ? ` ↪ re ${details.replyTo}` : "";
		const header = `✉ ${details.kind || "message"} from ${who}${details.relation ? ` (${details.relation})` : ""}${reply}`;
		const content = typeof message.content === "string" ? message.content : textOf(message.content);
		const match = /<agent-message\b[^>\n]*>\n([\s\S]*?)\n<\/agent-message>/.exec(content);
		const body = options.expanded || !match ? content : match[1];
		const lines = [theme.fg("accent", theme.bold(`╭─ ${header}`)), ...body.split("\n").map((line) => `${theme.fg("accent", "│")} ${line}`), theme.fg("accent", "╰─")];
		const box = new Box(1, 0, (text: string) => theme.bg("customMessageBg", text));
		box.addChild(new Text(lines.join("\n"), 0, 0));
		return box;
	});

	if (bridgePath) {
		await bridgeMode(bridgePath);
	} else {
		foregroundMode();
	}

	// ---------------------------------------------------------------- bridge (background job)

	async function bridgeMode(socketPath: string): Promise<void> {
		const link = await Link.connect(socketPath);
		/** Queue seqs of roost user messages that pi has not ended yet, in order. */
		const tags: Json[] = [];

		/**
		 * Put items into the session. When pi is idle only the first item may start a run
		 * (the worker sends one item then, and the rest once the run has started); while
		 * it runs every item is a steer, taken in before the next model call. `together`
		 * (agent items only): for an idle pi, all but the last are appended and the last
		 * starts the run, so one model request holds them all.
		 */
		const apply = (items: Item[], together = false) => {
			const quiet = together && items.every((item) => item.kind !== "reply") && (ctxRef ? ctxRef.isIdle() : true);
			items.forEach((item, index) => {
				if (quiet && index < items.length - 1) {
					inject({ ...item, delivery: "steer" }, true);
					return;
				}
				const idle = index === 0 && (ctxRef ? ctxRef.isIdle() : true);
				if (item.kind === "reply") {
					tags.push({ seq: item.seq, kind: item.kind });
					if (idle) pi.sendUserMessage(item.content);
					else pi.sendUserMessage(item.content, { deliverAs: "steer" });
				} else {
					// The worker already held a follow-up until the run it waited for had ended.
					inject({ ...item, delivery: "steer" });
				}
			});
		};

		link.onRequest = async (frame) => {
			switch (frame.op) {
				case "steer":
					apply((frame.items ?? []) as Item[], !!frame.together);
					return {};
				case "tag":
					// The next user message (an RPC prompt the worker sends now) carries these seqs.
					tags.push({ seq: frame.seq, kind: frame.kind ?? "reply" });
					return {};
				case "untag":
					tags.length = 0;
					return {};
				case "mark":
					pi.appendEntry(SEQ_ENTRY, { seq: frame.seq, kind: frame.kind ?? "reply", dialog: !!frame.dialog });
					return {};
				case "state":
					return { idle: ctxRef ? ctxRef.isIdle() : true, pending: ctxRef ? ctxRef.hasPendingMessages() : false };
				default:
					throw new Error(`unknown bridge op ${frame.op}`);
			}
		};
		let leaving = false;
		link.onClose = () => {
			// The worker is gone: nothing may run on without it.
			if (!leaving) ctxRef?.shutdown();
		};
		// This session ends (pi quits, or switches to another session file, whose own
		// instance of this extension connects again): let go of the worker's channel.
		pi.on("session_shutdown", () => {
			leaving = true;
			link.close();
		});

		const hello = await link.call("hello", { pid: process.pid });
		// The tools pi starts carry the job they run for (a warm pi started under a slot's).
		if (typeof hello.job === "string") process.env.ROOST_JOB = hello.job;
		if (typeof hello.notice === "string" && hello.notice) notice = hello.notice;
		registerTools((hello.tools ?? []) as ToolDef[], (def, args) => link.call("tool_call", { name: def.name, args }));

		pi.on("session_start", (_event, ctx) => {
			ctxRef = ctx;
		});
		// A tool boundary: the worker hands over what waits (agent items, replies); pi puts
		// them in before its next model call.
		pi.on("tool_result", async (_event, ctx) => {
			ctxRef = ctx;
			try {
				const answer = await link.call("boundary");
				apply((answer.items ?? []) as Item[]);
			} catch {
				// The worker will hand them over at the next boundary or when pi is idle.
			}
			return undefined;
		});
		// Before each model request: the items it holds new are seen (the worker tells the daemon).
		pi.on("context", (event) => {
			const seqs = newAgentSeqs(event.messages);
			if (seqs.length > 0) link.notify("seen", { seqs });
			return undefined;
		});
		pi.on("message_end", (event, ctx) => {
			ctxRef = ctx;
			const message = event.message as Json;
			if (message.role === "user" && tags.length > 0) {
				// The seq goes into the same session-file line as the reply itself.
				return { message: { ...message, roost: tags.shift() } as any };
			}
			return undefined;
		});
	}

	// ---------------------------------------------------------------- foreground (interactive pi)

	function foregroundMode(): void {
		let link: Link | null = null;
		let tools: ToolDef[] | null = null;
		let peer: Promise<string> | null = null;
		let peerId: string | null = null;
		let sessionFile: string | undefined;
		let sessionId: string | undefined;
		let lockedFile: string | undefined;
		let shuttingDown = false;
		let retry: NodeJS.Timeout | undefined;
		const injected = new Set<string>();
		const awaitingEnd = new Set<number>();
		// Message ids of the agent items this session holds, and second copies to ack.
		const seenIds = new Set<string>();
		let lastSeq = 0;
		let copies: number[] = [];
		/** The tree's sessions on a dialog, as the last `dialogs` event listed them. */
		let waitingDialogs: Json[] = [];
		/** Attached: the seqs of the job's user replies sent as user messages pi has not ended. */
		const replyTags: Json[] = [];
		/** Attached: the items taken in since the last run ended (the next run's causes). */
		let runCauses: Json[] = [];

		const eligible = async (ctx: ExtensionContext): Promise<string | null> => {
			if (!ctx.hasUI) return "this pi has no UI";
			if (process.env.ROOST_PI_SCRATCH) return "a scratch session";
			const file = ctx.sessionManager.getSessionFile();
			if (file && (await otherHolder(file)) !== null) return "its session file is held by another process (a background job)";
			return null;
		};

		const connect = async (): Promise<Link> => {
			if (link && !link.closed) return link;
			const fresh = await connectDaemon();
			fresh.onEvent = onEvent;
			fresh.onBadFrame = (reason) => ctxRef?.ui.notify(`roost: ${reason}`, "error");
			fresh.onClose = () => {
				if (link === fresh) link = null;
				peer = null;
				peerId = null;
				if (processState.wanted && !shuttingDown) scheduleReconnect();
			};
			link = fresh;
			return fresh;
		};

		const scheduleReconnect = (delay = 200) => {
			if (retry) return;
			retry = setTimeout(() => {
				retry = undefined;
				if (shuttingDown || !ctxRef) return;
				ensurePeer(ctxRef).catch(() => scheduleReconnect(Math.min(delay * 2, 5000)));
			}, delay);
		};

		/** The peer's name: ROOST_PI_NAME, else pi's session name (`/name`), else the folder. */
		const peerName = (ctx: ExtensionContext): string =>
			process.env.ROOST_PI_NAME || ctx.sessionManager.getSessionName?.() || path.basename(ctx.cwd);
		let registeredName: string | undefined;

		const registration = (ctx: ExtensionContext): Json => ({
			session: sessionFile ?? null,
			name: peerName(ctx),
			cwd: ctx.cwd,
			pid: process.pid,
			sessionId, // the daemon takes a UUIDv7's random tail for the peer id
			host: "pi",
			// The daemon numbers what it sends after what we hold, so a new daemon's seqs
			// go on where the old one's stopped (and are never taken for resends).
			lastSeq: lastSeq,
			...(attachToken ? { attach: attachToken } : {}),
		});

		const ensurePeer = (ctx: ExtensionContext): Promise<string> => {
			if (peer) return peer;
			if (shuttingDown) return Promise.reject(new Error("roost: this session has ended"));
			peer = (async () => {
				const why = await eligible(ctx);
				if (why) throw new Error(`roost: not joining as a peer: ${why}`);
				processState.wanted = true;
				const conn = await connect();
				sessionFile = ctx.sessionManager.getSessionFile() ?? undefined;
				sessionId = ctx.sessionManager.getSessionId();
				if (sessionFile) {
					await takeLock(sessionFile);
					lockedFile = sessionFile;
				}
				const args = registration(ctx);
				const answer = await conn.call("peer_register", args);
				registeredName = args.name;
				peerId = String(answer.id);
				// Remembered in the file: any later pi on this session registers at once
				// (not a job's attached session: its worker holds it once it detaches).
				if (!attachToken && !hasPeerMarker(ctx.sessionManager.getEntries())) pi.appendEntry(PEER_ENTRY, { peer: peerId });
				ctx.ui.setStatus(STATUS_KEY, `✉ roost ${peerId}`);
				return peerId;
			})();
			peer.catch(() => {
				peer = null;
			});
			return peer;
		};

		/**
		 * pi has no event for a rename (`/name`): the name is compared at each run start and
		 * each roost tool call (an in-memory lookup), and a changed one is registered again
		 * on the same connection (peer_register is idempotent; it updates the name).
		 */
		const followName = (ctx: ExtensionContext): void => {
			if (!peerId || !link || link.closed || registeredName === undefined) return;
			const args = registration(ctx);
			if (args.name === registeredName) return;
			registeredName = args.name;
			link.call("peer_register", args).catch(() => {
				registeredName = undefined; // registered again on the next reconnect
			});
		};

		/** A connection that only fetched the tools is closed: a session that is no peer holds none. */
		const dropIdleLink = (): void => {
			if (!link || peer) return;
			const idle = link;
			link = null;
			idle.onClose = undefined;
			idle.close();
		};

		/**
		 * The one ack. Acks are cumulative: an item's own ack (`ended`: pi has ended its
		 * message) takes with it the second copies that waited for it, and goes once pi has
		 * written the entry (after the message_end handler), never before; a second copy
		 * (`copy`) is acked at once unless an earlier item is not in the session yet, and
		 * then waits for that item's ack.
		 */
		const ack = (seq: number, why: "ended" | "copy"): void => {
			if (why === "ended") awaitingEnd.delete(seq);
			else copies.push(seq);
			const lowest = Math.min(...awaitingEnd);
			const covered = copies.filter((copy) => copy < lowest);
			copies = copies.filter((copy) => copy >= lowest);
			if (why === "copy" && covered.length === 0) return;
			const through = Math.max(...covered, ...(why === "ended" ? [seq] : []));
			const send = () => link?.notify("ack", { seq: through });
			if (why === "ended") setImmediate(send);
			else send();
		};

		const onEvent = (frame: Json) => {
			if (frame.event === "replaced") {
				// Another connection registered this session: it is the live holder now.
				peer = null;
				return;
			}
			if (frame.event === "dialogs") {
				// A background session of this tree waits on a dialog (or no longer does):
				// only the user can answer it, so the footer says so until it is answered.
				waitingDialogs = Array.isArray(frame.waiting) ? frame.waiting : [];
				ctxRef?.ui.setStatus(DIALOG_STATUS_KEY, dialogStatus(waitingDialogs));
				return;
			}
			if (frame.event !== "deliver") return;
			const seq = Number(frame.seq);
			if (Number.isInteger(seq)) lastSeq = Math.max(lastSeq, seq);
			// The daemon pushes again what was not acked when a connection comes back.
			const key = `${seq}\u0000${frame.content}`;
			if (injected.has(key)) return;
			injected.add(key);
			if (typeof frame.id === "string" && seenIds.has(frame.id)) {
				// A second copy of a message this session holds (its sender asked again after
				// a daemon died): acked, never shown twice.
				ack(seq, "copy");
				return;
			}
			if (typeof frame.id === "string") seenIds.add(frame.id);
			awaitingEnd.add(seq);
			if (attachToken && frame.kind === "reply") {
				// The job's user reply (attached): the user's own message, its seq tagged onto
				// the same session-file line (as the bridge does), so the worker that takes the
				// session back drops it.
				replyTags.push({ seq, kind: "reply" });
				if (ctxRef ? ctxRef.isIdle() : true) pi.sendUserMessage(String(frame.content ?? ""));
				else pi.sendUserMessage(String(frame.content ?? ""), { deliverAs: "steer" });
				return;
			}
			inject({ seq, kind: String(frame.kind ?? "message"), content: String(frame.content ?? ""), from: frame.from, fromName: frame.fromName, relation: frame.relation, trace: frame.trace, hops: frame.hops, id: frame.id, replyTo: frame.replyTo, replyQuote: frame.replyQuote, scope: frame.scope, delivery: frame.delivery });
		};

		const fetchTools = async (): Promise<ToolDef[]> => {
			if (tools) return tools;
			const conn = await connect();
			const answer = await conn.call("tools");
			tools = (answer.tools ?? []) as ToolDef[];
			if (typeof answer.notice === "string" && answer.notice) notice = answer.notice;
			return tools;
		};

		pi.on("session_start", async (_event, ctx) => {
			ctxRef = ctx;
			for (const entry of ctx.sessionManager.getEntries() as Json[]) {
				if (entry?.customType !== MESSAGE_TYPE) continue;
				if (typeof entry.details?.id === "string") seenIds.add(entry.details.id);
				if (Number.isInteger(entry.details?.seq)) lastSeq = Math.max(lastSeq, entry.details.seq);
			}
			if (await eligible(ctx)) return;
			let defs: ToolDef[];
			try {
				defs = await fetchTools();
			} catch (err) {
				ctx.ui.notify(`roost: agent tools unavailable (${errorText(err)})`, "warning");
				return;
			}
			if (defs.length === 0) {
				// agentTools: false. roost stays out of this session: no tools, no footer, no peer.
				ctx.ui.setStatus(STATUS_KEY, undefined);
				dropIdleLink();
				return;
			}
			registerTools(defs, async (def, args, toolCtx) => {
				// The call's own key: when the connection dies before the answer, it is asked
				// again with the same key once a daemon is back, which answers what the first
				// ask did (done once, never twice).
				const key = randomUUID();
				const deadline = Date.now() + REASK_MS;
				// After a lost answer the daemon is told this is the key asked again (a
				// send asked again is not refused queue_full: the first may have arrived).
				let again = false;
				for (let pause = 100; ; pause = Math.min(pause * 2, 2000)) {
					try {
						await ensurePeer(toolCtx);
						followName(toolCtx);
						return await link!.call("tool_call", { name: def.name, args, key, ...(again ? { again: true } : {}) });
					} catch (err) {
						if (!isConnectionLoss(err) || Date.now() >= deadline) throw err;
						again = true;
					}
					await new Promise((resolve) => setTimeout(resolve, pause));
				}
			});
			ctx.ui.setStatus(STATUS_KEY, peerId ? `✉ roost ${peerId}` : "✉ roost");
			// A session roost was part of before joins now, so what is held for it (a
			// child's report) arrives by itself; so does every session of a pi that has
			// been a peer. Fired twice on new_session: registering the same session again
			// is a no-op.
			const joins = !!attachToken || processState.wanted || roostSession(ctx.sessionManager.getEntries());
			if (joins && (!peer || ctx.sessionManager.getSessionId() !== sessionId)) {
				peer = null;
				ensurePeer(ctx).catch((err) => ctx.ui.notify(errorText(err), "warning"));
			} else if (!joins) {
				dropIdleLink();
			}
		});

		pi.on("agent_start", (_event, ctx) => {
			ctxRef = ctx;
			followName(ctx);
			// Attached: the job runs (as its worker would say), in the user's terminal.
			if (attachToken && peerId && link && !link.closed) link.notify("job_status", { state: "running" });
		});

		pi.on("agent_end", (event, ctx) => {
			ctxRef = ctx;
			if (!attachToken || !peerId || !link || link.closed) return;
			// The run is over: handed back with what caused it, as the job's worker hands
			// a run back (the daemon's handback plugin decides whether the parent hears).
			const messages = ((event as Json).messages ?? []) as Json[];
			const last = [...messages].reverse().find((m) => m?.role === "assistant") ?? {};
			const text = textOf(last.content);
			const causes = runCauses;
			runCauses = [];
			const state = causes.some((cause) => cause.kind === "reply") ? "done" : "idle";
			if (causes.length > 0) {
				link.call("handback", { result: text.slice(0, 6000), state, causes, run: causes[0].seq }).catch(() => undefined);
			} else {
				const summary = text.split("\n").map((line) => line.trim()).find((line) => line) ?? null;
				link.notify("job_status", { state, settled: true, summary: summary ? summary.slice(0, 200) : null });
			}
		});

		pi.on("message_end", (event, ctx) => {
			ctxRef = ctx;
			const message = event.message as Json;
			if (message.role === "user" && replyTags.length > 0) {
				const tag = replyTags.shift()!;
				runCauses.push({ seq: tag.seq, kind: "reply", sender: null, joined: runCauses.length > 0 });
				ack(tag.seq, "ended");
				return { message: { ...message, roost: tag } as any };
			}
			if (message.role !== "custom" || message.customType !== MESSAGE_TYPE) return undefined;
			const seq = Number(message.details?.seq);
			if (!awaitingEnd.has(seq)) return undefined;
			if (attachToken) runCauses.push({ seq, kind: String(message.details?.kind ?? "message"), sender: message.details?.from ?? null, joined: runCauses.length > 0 });
			ack(seq, "ended");
			return undefined;
		});

		// Before each model request: the items it holds new are seen (told to the daemon
		// on the peer's connection; an item is only ever pushed on one).
		pi.on("context", (event) => {
			const seqs = newAgentSeqs(event.messages);
			if (seqs.length > 0 && peerId && link && !link.closed) link.notify("seen", { seqs });
			return undefined;
		});

		pi.on("session_shutdown", () => {
			shuttingDown = true;
			if (retry) clearTimeout(retry);
			link?.close();
			link = null;
			if (lockedFile) releaseLock(lockedFile);
		});

		pi.registerCommand("roost-answer", {
			description: "Answer a background session's dialog (the footer says which waits)",
			handler: async (_args, ctx) => {
				if (waitingDialogs.length === 0) {
					ctx.ui.notify("roost: no background session waits on a dialog", "info");
					return;
				}
				let dialog = waitingDialogs[0];
				if (waitingDialogs.length > 1) {
					const labels = waitingDialogs.map((w) => `${shown(String(w.name))} (${w.id})`);
					const picked = await ctx.ui.select("Which session's dialog?", labels);
					if (picked === undefined) return;
					dialog = waitingDialogs[labels.indexOf(picked)];
				}
				const title = `${shown(String(dialog.name))} asks: ${shown(String(dialog.question ?? ""))}`;
				const options = Array.isArray(dialog.options) ? dialog.options.map(String) : [];
				// pi's own dialog, in this terminal; the daemon checks the answer (op answer).
				const text = options.length ? await ctx.ui.select(title, options) : await ctx.ui.input(title);
				if (text === undefined) return;
				const conn = await connectDaemon();
				try {
					const answer = await conn.call("answer", { job: dialog.id, text, key: randomUUID() });
					ctx.ui.notify(`roost: answered ${answer.name} (${answer.id}): ${answer.answer}`, "info");
				} catch (err) {
					ctx.ui.notify(`roost: ${errorText(err)}`, "error");
				} finally {
					conn.close();
				}
			},
		});

		pi.registerCommand("roost-background", {
			description: "Hand this session to a roost background job (optionally with a task)",
			handler: async (args, ctx) => {
				await ctx.waitForIdle();
				const file = ctx.sessionManager.getSessionFile();
				if (!file || !fs.existsSync(file)) {
					ctx.ui.notify("roost: this session has no file yet; nothing to hand off", "warning");
					return;
				}
				const task = args.trim() || "Continue where we left off.";
				const model = ctx.model ? `${ctx.model.provider}/${ctx.model.id}` : undefined;
				const thinking = pi.getThinkingLevel?.();
				// The job takes the file over: this process lets go of it first, and does
				// not come back for it (no reconnect, no lazy registration).
				shuttingDown = true;
				if (retry) clearTimeout(retry);
				link?.close();
				link = null;
				peer = null;
				if (lockedFile) releaseLock(lockedFile);
				lockedFile = undefined;
				let started: Json;
				const conn = await connectDaemon();
				try {
					started = await conn.call("start", { task, session: file, host: "pi", cwd: ctx.cwd, name: peerName(ctx), ...(model ? { model } : {}), ...(thinking ? { thinking } : {}) });
				} catch (err) {
					shuttingDown = false;
					ctx.ui.notify(`roost: could not hand off: ${errorText(err)}`, "error");
					return;
				} finally {
					conn.close();
				}
				ctx.ui.notify(`roost: moved to the background as ${started.id} (${started.name})`, "info");
				await ctx.newSession();
			},
		});
	}
}


/**
 * A model request's messages with the no-user-authority notice once per run of consecutive
 * agent messages (roost_core.envelope_rules.one_notice): an agent message that ends with
 * the notice loses it when the next message is an agent message that ends with it too, so
 * every envelope is still followed by the notice. Null when nothing changes. The messages
 * are copied, never changed: they are the session's own.
 */
function oneNotice(messages: Json[], notice: string): Json[] | null {
	const tail = `\n${notice}`;
	const noticed = (message: Json | undefined): boolean =>
		message?.role === "custom" && message.customType === MESSAGE_TYPE && typeof message.content === "string" && message.content.endsWith(tail);
	let changed = false;
	const out = messages.map((message, index) => {
		if (!noticed(message) || !noticed(messages[index + 1])) return message;
		changed = true;
		return { ...message, content: message.content.slice(0, -tail.length) };
	});
	return changed ? out : null;
}

function textOf(content: unknown): string {
	if (!Array.isArray(content)) return String(content ?? "");
	return content.map((part: any) => (part?.type === "text" ? part.text : "")).join("");
}
