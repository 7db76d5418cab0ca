// `Limiter` and `Throttle`, the classes the package exports: JS halves over the module's
// `LimiterCore`. JS reads the options (flattened into numbers and
// texts), the clock, and keeps the promises, timers and abort signals; the module
// decides, writing each decision into six numbers of its memory that JS reads through a
// view, so a call allocates nothing. Copied into each module's folder by
// scripts/build-wasm.sh.
import { feedback } from "./feedback.js";
import { decide, LimiterCore, wasmMemory } from "./sluicegate_wasm.js";

/** Milliseconds since the Unix epoch: `performance.now()`, monotonic, anchored once. */
const origin = Date.now() - performance.now();
const clock = () => origin + performance.now();

/** The number fields of an options object, in the order of `NUMBERS` in options.rs. */
const NUMBERS = ["limit", "capacity", "rate", "periodMs", "overdraft", "threshold", "windowMs", "durationMs"];
const TEXTS = ["algorithm", "calendar", "timeZone"];
const NODE = 15;

/** `object[name]` if it is of `type`, undefined if absent; throws otherwise. */
function field(object, name, type, expected) {
  const value = object[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== type || (type === "object" && Array.isArray(value))) {
    throw new Error(`options.${name} must be ${expected}`);
  }
  return value;
}

/**
 * Options as the module reads them (`Flat` in options.rs): each object a node of NODE
 * numbers (NaN for absent: the number fields, `countDenied`, the offsets of `ban`, of
 * `members` and its length, of `boundariesMs` and its length, the node's ordinal), and
 * three texts per node, joined by newlines. The module checks values and ranges.
 */
function flatten(options) {
  const numbers = [];
  const texts = [];
  const node = (object) => {
    if (object === null || typeof object !== "object") throw new Error("options must be an object");
    const at = numbers.length;
    for (let i = 0; i < NODE; i++) numbers.push(NaN);
    numbers[at + NODE - 1] = texts.length / 3;
    NUMBERS.forEach((name, i) => {
      numbers[at + i] = field(object, name, "number", "a number") ?? NaN;
    });
    const denied = field(object, "countDenied", "boolean", "a boolean");
    if (denied !== undefined) numbers[at + 8] = denied ? 1 : 0;
    for (const name of TEXTS) texts.push(field(object, name, "string", "a string") ?? "");
    const ban = field(object, "ban", "object", "an object");
    if (ban !== undefined) numbers[at + 9] = node(ban);
    const members = object.members ?? undefined;
    if (members !== undefined) {
      if (!Array.isArray(members)) throw new Error("options.members must be an array");
      const offsets = members.map(node);
      numbers[at + 10] = numbers.length;
      numbers[at + 11] = offsets.length;
      numbers.push(...offsets);
    }
    const boundaries = object.boundariesMs ?? undefined;
    if (boundaries !== undefined) {
      // What is not an array of numbers reads as NaN, which makes no increasing times.
      const times = Array.from(boundaries, (time) => (typeof time === "number" ? time : NaN));
      numbers[at + 12] = numbers.length;
      numbers[at + 13] = times.length;
      numbers.push(...times);
    }
    return at;
  };
  node(options);
  return [texts.join("\n"), Float64Array.from(numbers)];
}

/** The module's memory, read once it is initialized. */
let memory;

/** Reads a core's six decision numbers, anew when the memory grew (its buffer detached). */
function slotsOf(core) {
  memory ??= wasmMemory();
  let view = new Float64Array(memory.buffer, core.slots(), 6);
  return () => {
    if (view.length === 0) view = new Float64Array(memory.buffer, core.slots(), 6);
    return view;
  };
}

/** The decision in `slots` as a plain object. */
function decision(slots) {
  return {
    allowed: slots[0] === 1,
    limit: slots[1],
    remaining: slots[2],
    retryAfterMs: slots[3] < 0 ? null : slots[3],
    resetAfterMs: slots[4],
    delayMs: slots[5],
  };
}

/** The last decision's fields, read from the slots as they are asked for. */
function view(slots) {
  return Object.freeze({
    get allowed() { return slots()[0] === 1; },
    get limit() { return slots()[1]; },
    get remaining() { return slots()[2]; },
    get retryAfterMs() { const ms = slots()[3]; return ms < 0 ? null : ms; },
    get resetAfterMs() { return slots()[4]; },
    get delayMs() { return slots()[5]; },
  });
}

const FULL_ONLY = 'report needs the full module: import from "sluicegate-wasm/full"';

/** `decide`'s calls and its answer for a freed limiter. */
const CHECK = 0;
const PEEK = 1;
const RESERVE = 2;
const FREED = 3;
/** A handle no limiter has: a freed one's. */
const NONE = -1;

/**
 * A limit this client keeps for itself: `check` before acting, `reserve` to book a slot,
 * `save` / `load` to keep the state across page loads. Times are milliseconds since the
 * Unix epoch (fractions allowed, exact to the microsecond); leave `nowMs` out to read
 * `performance.now()`. Invalid input throws an `Error` with a message.
 */
export class Limiter {
  #core;
  /** The core's handle for `decide`, the hot call (a free function: a method costs more). */
  #handle;
  #slots;
  #last;
  /** The slots as `check` reads them: renewed here when the memory grew. */
  #view;

  /** A fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options) {
    this.#core = new LimiterCore(...flatten(options), 1);
    this.#handle = this.#core.handle;
    this.#slots = slotsOf(this.#core);
    this.#last = view(this.#slots);
    this.#view = this.#slots();
  }

  /** Decides a request of `cost` (default 1) and, if admitted, counts it. */
  check(cost, nowMs) {
    return this.#decided(decide(this.#handle, CHECK, cost ?? 1, nowMs ?? clock(), 0));
  }

  /**
   * `check`'s fast form: whether the request is admitted, the decision's fields in
   * `last` (read from the module's memory, valid until this limiter's next call).
   */
  admit(cost, nowMs) {
    const answer = decide(this.#handle, CHECK, cost ?? 1, nowMs ?? clock(), 0);
    if (answer > 1) this.#throw(answer);
    return answer === 1;
  }

  /** The fields of the last decision, for `admit`: nothing allocated per call. */
  get last() {
    return this.#last;
  }

  /** What `check` would answer, changing nothing. */
  peek(cost, nowMs) {
    return this.#decided(decide(this.#handle, PEEK, cost ?? 1, nowMs ?? clock(), 0));
  }

  /**
   * Books a slot within `maxWaitMs`: if admitted, act after `delayMs`. Buckets, pacing
   * and composites of them only; throws for windows and bans.
   */
  reserve(cost, maxWaitMs, nowMs) {
    return this.#decided(decide(this.#handle, RESERVE, cost, nowMs ?? clock(), maxWaitMs));
  }

  /**
   * Reports a cost known after the work (the full module): `adjustment` units added to
   * what the limiter has taken (negative: given back), within its `overdraft`. Returns
   * what it `recorded` and `dropped` (beyond the bound) and the standing after it, what
   * a request of cost 0 gets. Throws for pacing and bans (they take no reports).
   */
  report(adjustment, nowMs) {
    if (this.#core.report === undefined) throw new Error(FULL_ONLY);
    const recorded = this.#core.report(adjustment, nowMs ?? clock());
    return { recorded, dropped: Math.abs(adjustment) - recorded, ...decision(this.#slots()) };
  }

  /** The state in sluicegate's canonical encoding (empty when fresh). */
  save() {
    return this.#core.save();
  }

  /** Restores a state `save` returned; throws, keeping the state, for foreign bytes. */
  load(bytes) {
    this.#core.load(bytes);
  }

  /** Forgets everything: the limiter is fresh again. */
  reset() {
    this.#core.reset();
  }

  /** Frees the wasm memory now instead of when the limiter is garbage collected. */
  free() {
    this.#handle = NONE;
    this.#core.free();
  }

  #decided(answer) {
    if (answer > 1) this.#throw(answer);
    let slots = this.#view;
    if (slots.length === 0) slots = this.#view = this.#slots();
    return decision(slots);
  }

  #throw(answer) {
    throw new Error(answer === FREED ? "this limiter was freed" : this.#core.rejection());
  }
}

/**
 * Queues calls and runs them, in order, as the limit allows; obeys the server's
 * `Retry-After` and `RateLimit` headers. Calls still waiting keep it alive (a timer).
 */
export class Throttle {
  #core;
  #calls = new Map();
  #ids = 0;
  #timer;
  #timerAt = NaN;

  /** A throttle over a fresh limiter. Throws an `Error` naming the first invalid option. */
  constructor(options) {
    const [texts, numbers] = flatten(options);
    const maxQueued = field(options, "maxQueued", "number", "a number") ?? 1000;
    this.#core = new LimiterCore(texts, numbers, maxQueued);
  }

  /**
   * Runs `task` when the limit (and the server) allow, after every call scheduled before
   * it. The promise settles with the task's result, or rejects with its exception, with
   * the signal's reason if aborted first, or with an `Error` if the queue is full or the
   * cost can never fit. An invalid cost throws.
   */
  schedule(task, options) {
    const cost = options?.cost ?? 1;
    const signal = options?.signal ?? undefined;
    let call;
    const promise = new Promise((resolve, reject) => {
      call = { task, resolve, reject, signal, listener: undefined };
    });
    if (signal?.aborted) {
      call.reject(signal.reason);
      return promise;
    }
    const id = this.#ids;
    this.#ids = (id + 1) >>> 0;
    // One reading for the queue and the pump: whether a cost can fit depends on when.
    const now = clock();
    const pushed = this.#core.push(id, cost, now);
    if (pushed === 2) throw new Error(this.#core.rejection());
    if (pushed === 1) {
      call.reject(new Error(this.#core.rejection()));
      return promise;
    }
    if (signal) {
      call.listener = () => this.#abort(id);
      signal.addEventListener("abort", call.listener);
    }
    this.#calls.set(id, call);
    this.#pump(now);
    return promise;
  }

  /**
   * Reads a server response (or its `Headers`): `Retry-After` (seconds or an HTTP date)
   * pauses the queue until then; `RateLimit` (with `RateLimit-Policy`) caps what runs
   * until the server's window ends. Cross-origin responses expose these headers only if
   * the server lists them in `Access-Control-Expose-Headers`.
   */
  observe(response) {
    const headers = typeof response?.get === "function" ? response : response?.headers;
    if (typeof headers?.get !== "function") {
      throw new Error("observe needs a fetch Response or its Headers (an object with get(name))");
    }
    this.#core.observe(...feedback((name) => headers.get(name), clock()));
    this.#pump();
  }

  /** How many calls are waiting. */
  get queued() {
    return this.#core.queued;
  }

  /** The limiter's state, as `Limiter.save`. */
  save() {
    return this.#core.save();
  }

  /** Restores a state, as `Limiter.load`. */
  load(bytes) {
    this.#core.load(bytes);
    this.#pump();
  }

  /** Runs every call that may run at `now`, then sets one timer for the next that may. */
  #pump(now = clock()) {
    // One reading per pump: a later call decided at an earlier instant waits, never runs early.
    for (;;) {
      const next = this.#core.next(now);
      if (next === 1) {
        this.#run(this.#core.at);
      } else if (next === 2) {
        this.#wake(this.#core.at);
        return;
      } else if (next === 3) {
        this.#take(this.#core.at).reject(new Error(this.#core.rejection()));
      } else {
        if (this.#timer !== undefined) clearTimeout(this.#timer);
        this.#timer = undefined;
        this.#timerAt = NaN;
        return;
      }
    }
  }

  #wake(at) {
    if (this.#timerAt === at) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#timerAt = NaN;
      this.#pump();
    }, Math.max(0, Math.ceil(at - clock())));
  }

  /** Settles call `id` with its task's result (a promise is adopted) or exception. */
  #run(id) {
    const call = this.#take(id);
    try {
      call.resolve(call.task());
    } catch (error) {
      call.reject(error);
    }
  }

  #abort(id) {
    if (!this.#core.remove(id)) return;
    const call = this.#take(id);
    call.reject(call.signal.reason);
    this.#pump();
  }

  #take(id) {
    const call = this.#calls.get(id);
    this.#calls.delete(id);
    call.signal?.removeEventListener("abort", call.listener);
    return call;
  }
}

if (Symbol.dispose) Limiter.prototype[Symbol.dispose] = Limiter.prototype.free;
