/* @ts-self-types="./sluicegate_wasm.d.ts" */
import { show } from './snippets/sluicegate-wasm-092e72b50b90fc2f/inline0.js';


/**
 * The wasm half of `Limiter` and of `Throttle` (`limiter.js`): a handle on a limit and
 * the queue of call ids a throttle runs under it (one class: each export costs glue).
 * Not meant to be used directly. Times are milliseconds since the Unix epoch (fractions
 * allowed, exact to the microsecond).
 */
export class LimiterCore {
    __destroy_into_raw() {
        const ptr = this.__wbg_ptr;
        this.__wbg_ptr = 0;
        LimiterCoreFinalization.unregister(this);
        return ptr;
    }
    free() {
        const ptr = this.__destroy_into_raw();
        wasm.__wbg_limitercore_free(ptr, 0);
    }
    /**
     * The call to run, or the instant to wait for, that `next` named.
     * @returns {number}
     */
    get at() {
        const ret = wasm.limitercore_at(this.__wbg_ptr);
        return ret;
    }
    /**
     * This limiter's handle, for `decide`.
     * @returns {number}
     */
    get handle() {
        const ret = wasm.limitercore_handle(this.__wbg_ptr);
        return ret >>> 0;
    }
    /**
     * Restores a state `save` returned. Throws, keeping the current state, if the bytes
     * are not a state of this limiter.
     * @param {Uint8Array | number[]} bytes
     */
    load(bytes) {
        const ptr0 = passArray8ToWasm0(bytes, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.limitercore_load(this.__wbg_ptr, ptr0, len0);
        if (ret[1]) {
            throw takeFromExternrefTable0(ret[0]);
        }
    }
    /**
     * A fresh limiter from options as `flatten` writes them, holding at most
     * `maxQueued` waiting calls. Throws an `Error` naming the first invalid option.
     * @param {string} texts
     * @param {Float64Array | number[]} numbers
     * @param {number} maxQueued
     */
    constructor(texts, numbers, maxQueued) {
        const val3 = +maxQueued;
        let ptr0, len0, ptr1, len1;
        try {
            ptr0 = passStringToWasm0(texts, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
            len0 = WASM_VECTOR_LEN;
            ptr1 = passArrayF64ToWasm0(numbers, wasm.__wbindgen_malloc);
            len1 = WASM_VECTOR_LEN;
        } catch (e) {
            if (ptr1) { wasm.__wbindgen_free(ptr1, len1 * 8, 8); }
            if (ptr0) { wasm.__wbindgen_free(ptr0, len0 * 1, 1); }
            throw e;
        }
        const ret = wasm.limitercore_new(ptr0, len0, ptr1, len1, val3);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        this.__wbg_ptr = ret[0];
        LimiterCoreFinalization.register(this, this.__wbg_ptr, this);
        return this;
    }
    /**
     * What to do at `nowMs`: 0 nothing is queued, 1 run the call `at` names, 2 wait
     * until `at`, 3 refuse the call `at` names, which can never run (the reason in
     * `rejection`).
     * @param {number} nowMs
     * @returns {number}
     */
    next(nowMs) {
        const ret = wasm.limitercore_next(this.__wbg_ptr, nowMs);
        return ret >>> 0;
    }
    /**
     * What the server asked (read from its headers by `limiter.js`), each NaN when it
     * did not: nothing runs before `resumeAtMs` (`Retry-After`), and at most
     * `remaining` units until `untilMs` (`RateLimit`).
     * @param {number} resumeAtMs
     * @param {number} remaining
     * @param {number} untilMs
     */
    observe(resumeAtMs, remaining, untilMs) {
        wasm.limitercore_observe(this.__wbg_ptr, resumeAtMs, remaining, untilMs);
    }
    /**
     * Queues call `id` of `cost` at `nowMs`: 0 queued; 1 refused (a full queue, a cost
     * that can never fit) and 2 invalid, each with a `rejection`.
     * @param {number} id
     * @param {number} cost
     * @param {number} nowMs
     * @returns {number}
     */
    push(id, cost, nowMs) {
        const ret = wasm.limitercore_push(this.__wbg_ptr, id, cost, nowMs);
        return ret >>> 0;
    }
    /**
     * How many calls are waiting.
     * @returns {number}
     */
    get queued() {
        const ret = wasm.limitercore_queued(this.__wbg_ptr);
        return ret >>> 0;
    }
    /**
     * Why the last `decide` or `push` answered invalid or refused.
     * @returns {string}
     */
    rejection() {
        let deferred1_0;
        let deferred1_1;
        try {
            const ret = wasm.limitercore_rejection(this.__wbg_ptr);
            deferred1_0 = ret[0];
            deferred1_1 = ret[1];
            return getStringFromWasm0(ret[0], ret[1]);
        } finally {
            wasm.__wbindgen_free(deferred1_0, deferred1_1, 1);
        }
    }
    /**
     * Takes call `id` out of the queue (aborted); whether it was waiting.
     * @param {number} id
     * @returns {boolean}
     */
    remove(id) {
        const ret = wasm.limitercore_remove(this.__wbg_ptr, id);
        return ret !== 0;
    }
    /**
     * Reports a cost known after the work: `adjustment` units added to what the limiter
     * has taken (negative: given back), within its `overdraft`. Returns the units
     * recorded; what a request of cost 0 gets after it lands in the slots. Throws on
     * pacing and bans (they take no reports) and on an adjustment that is not whole.
     * @param {number} adjustment
     * @param {number} nowMs
     * @returns {number}
     */
    report(adjustment, nowMs) {
        const ret = wasm.limitercore_report(this.__wbg_ptr, adjustment, nowMs);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return ret[0];
    }
    /**
     * Forgets everything: the limiter is fresh again.
     */
    reset() {
        wasm.limitercore_reset(this.__wbg_ptr);
    }
    /**
     * The state in sluicegate's canonical encoding (empty when fresh); the same bytes
     * the Rust hosts store.
     * @returns {Uint8Array}
     */
    save() {
        const ret = wasm.limitercore_save(this.__wbg_ptr);
        var v1 = getArrayU8FromWasm0(ret[0], ret[1]).slice();
        wasm.__wbindgen_free(ret[0], ret[1] * 1, 1);
        return v1;
    }
    /**
     * Where the decisions land: six numbers in the module's memory.
     * @returns {number}
     */
    slots() {
        const ret = wasm.limitercore_slots(this.__wbg_ptr);
        return ret >>> 0;
    }
}
if (Symbol.dispose) LimiterCore.prototype[Symbol.dispose] = LimiterCore.prototype.free;

/**
 * `check` (0), `peek` (1) or `reserve` (2, within `maxWaitMs`) on the limiter `handle`
 * names: 0 denied, 1 allowed (the decision in its slots), 2 invalid input (the message
 * in its `rejection`), 3 freed. `Limiter`'s hot call, a free function: not meant to be
 * used directly.
 * @param {number} handle
 * @param {number} call
 * @param {number} cost
 * @param {number} nowMs
 * @param {number} maxWaitMs
 * @returns {number}
 */
export function decide(handle, call, cost, nowMs, maxWaitMs) {
    const ret = wasm.decide(handle, call, cost, nowMs, maxWaitMs);
    return ret >>> 0;
}

/**
 * The module's memory, for the views `limiter.js` reads decisions through.
 * @returns {any}
 */
export function wasmMemory() {
    const ret = wasm.wasmMemory();
    return ret;
}
function __wbg_get_imports() {
    const import0 = {
        __proto__: null,
        __wbg_Error_208446807d0d1e30: function(arg0, arg1) {
            const ret = Error(getStringFromWasm0(arg0, arg1));
            return ret;
        },
        __wbg___wbindgen_memory_17a1178bc3328ea3: function() {
            const ret = wasm.memory;
            return ret;
        },
        __wbg___wbindgen_throw_4c88d8bf264fd984: function(arg0, arg1) {
            throw new Error(getStringFromWasm0(arg0, arg1));
        },
        __wbg_show_c479b8afd616523f: function(arg0, arg1) {
            const ret = show(arg1);
            const ptr1 = passStringToWasm0(ret, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
            const len1 = WASM_VECTOR_LEN;
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 1, len1, true);
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 0, ptr1, true);
        },
        __wbindgen_init_externref_table: function() {
            const table = wasm.__wbindgen_externrefs;
            table.set(0, undefined);
            table.set(1024, undefined);
            table.set(1025, null);
            table.set(1026, true);
            table.set(1027, false);
        },
    };
    return {
        __proto__: null,
        "./sluicegate_wasm_bg.js": import0,
    };
}

const LimiterCoreFinalization = (typeof FinalizationRegistry === 'undefined')
    ? { register: () => {}, unregister: () => {} }
    : new FinalizationRegistry(ptr => wasm.__wbg_limitercore_free(ptr, 1));

function getArrayU8FromWasm0(ptr, len) {
    ptr = ptr >>> 0;
    return getUint8ArrayMemory0().subarray(ptr / 1, ptr / 1 + len);
}

let cachedDataViewMemory0 = null;
function getDataViewMemory0() {
    if (cachedDataViewMemory0 === null || cachedDataViewMemory0.buffer.detached === true || (cachedDataViewMemory0.buffer.detached === undefined && cachedDataViewMemory0.buffer !== wasm.memory.buffer)) {
        cachedDataViewMemory0 = new DataView(wasm.memory.buffer);
    }
    return cachedDataViewMemory0;
}

let cachedFloat64ArrayMemory0 = null;
function getFloat64ArrayMemory0() {
    if (cachedFloat64ArrayMemory0 === null || cachedFloat64ArrayMemory0.byteLength === 0) {
        cachedFloat64ArrayMemory0 = new Float64Array(wasm.memory.buffer);
    }
    return cachedFloat64ArrayMemory0;
}

function getStringFromWasm0(ptr, len) {
    ptr = ptr >>> 0;
    return decodeText(getUint8ArrayMemory0().subarray(ptr, ptr + len));
}

let cachedUint8ArrayMemory0 = null;
function getUint8ArrayMemory0() {
    if (cachedUint8ArrayMemory0 === null || cachedUint8ArrayMemory0.byteLength === 0) {
        cachedUint8ArrayMemory0 = new Uint8Array(wasm.memory.buffer);
    }
    return cachedUint8ArrayMemory0;
}

function passArray8ToWasm0(arg, malloc) {
    const ptr = malloc(arg.length * 1, 1) >>> 0;
    getUint8ArrayMemory0().set(arg, ptr / 1);
    WASM_VECTOR_LEN = arg.length;
    return ptr;
}

function passArrayF64ToWasm0(arg, malloc) {
    const ptr = malloc(arg.length * 8, 8) >>> 0;
    getFloat64ArrayMemory0().set(arg, ptr / 8);
    WASM_VECTOR_LEN = arg.length;
    return ptr;
}

function passStringToWasm0(arg, malloc, realloc) {
    if (realloc === undefined) {
        const buf = cachedTextEncoder.encode(arg);
        const ptr = malloc(buf.length, 1) >>> 0;
        getUint8ArrayMemory0().subarray(ptr, ptr + buf.length).set(buf);
        WASM_VECTOR_LEN = buf.length;
        return ptr;
    }

    let len = arg.length;
    let ptr = malloc(len, 1) >>> 0;

    const mem = getUint8ArrayMemory0();

    let offset = 0;

    for (; offset < len; offset++) {
        const code = arg.charCodeAt(offset);
        if (code > 0x7F) break;
        mem[ptr + offset] = code;
    }
    if (offset !== len) {
        if (offset !== 0) {
            arg = arg.slice(offset);
        }
        ptr = realloc(ptr, len, len = offset + arg.length * 3, 1) >>> 0;
        const view = getUint8ArrayMemory0().subarray(ptr + offset, ptr + len);
        const ret = cachedTextEncoder.encodeInto(arg, view);

        offset += ret.written;
        ptr = realloc(ptr, len, offset, 1) >>> 0;
    }

    WASM_VECTOR_LEN = offset;
    return ptr;
}

function takeFromExternrefTable0(idx) {
    const value = wasm.__wbindgen_externrefs.get(idx);
    wasm.__externref_table_dealloc(idx);
    return value;
}

let cachedTextDecoder = new TextDecoder('utf-8', { ignoreBOM: true });
cachedTextDecoder.decode();
const MAX_SAFARI_DECODE_BYTES = 2146435072;
let numBytesDecoded = 0;
function decodeText(bytes) {
    numBytesDecoded += bytes.length;
    if (numBytesDecoded >= MAX_SAFARI_DECODE_BYTES) {
        cachedTextDecoder = new TextDecoder('utf-8', { ignoreBOM: true });
        cachedTextDecoder.decode();
        numBytesDecoded = bytes.length;
    }
    return cachedTextDecoder.decode(bytes);
}

const cachedTextEncoder = new TextEncoder();

if (!('encodeInto' in cachedTextEncoder)) {
    cachedTextEncoder.encodeInto = function (arg, view) {
        const buf = cachedTextEncoder.encode(arg);
        view.set(buf);
        return {
            read: arg.length,
            written: buf.length
        };
    };
}

let WASM_VECTOR_LEN = 0;

let wasmModule, wasmInstance, wasm;
function __wbg_finalize_init(instance, module) {
    wasmInstance = instance;
    wasm = instance.exports;
    wasmModule = module;
    cachedDataViewMemory0 = null;
    cachedFloat64ArrayMemory0 = null;
    cachedUint8ArrayMemory0 = null;
    wasm.__wbindgen_start();
    return wasm;
}

async function __wbg_load(module, imports) {
    if (typeof Response === 'function' && module instanceof Response) {
        if (!module.ok) {
            throw new Error(`failed to fetch Wasm: ${module.status} ${module.statusText} fetching '${module.url}'`);
        }

        if (typeof WebAssembly.instantiateStreaming === 'function') {
            try {
                return await WebAssembly.instantiateStreaming(module, imports);
            } catch (e) {
                const validResponse = expectedResponseType(module.type);

                if (validResponse && module.headers.get('Content-Type') !== 'application/wasm') {
                    console.warn("`WebAssembly.instantiateStreaming` failed because your server does not serve Wasm with `application/wasm` MIME type. Falling back to `WebAssembly.instantiate` which is slower. Original error:\n", e);

                } else { throw e; }
            }
        }

        const bytes = await module.arrayBuffer();
        return await WebAssembly.instantiate(bytes, imports);
    } else {
        const instance = await WebAssembly.instantiate(module, imports);

        if (instance instanceof WebAssembly.Instance) {
            return { instance, module };
        } else {
            return instance;
        }
    }

    function expectedResponseType(type) {
        switch (type) {
            case 'basic': case 'cors': case 'default': return true;
        }
        return false;
    }
}

function initSync(module) {
    if (wasm !== undefined) return wasm;


    if (module !== undefined) {
        if (Object.getPrototypeOf(module) === Object.prototype) {
            ({module} = module)
        } else {
            console.warn('using deprecated parameters for `initSync()`; pass a single object instead')
        }
    }

    const imports = __wbg_get_imports();
    if (!(module instanceof WebAssembly.Module)) {
        module = new WebAssembly.Module(module);
    }
    const instance = new WebAssembly.Instance(module, imports);
    return __wbg_finalize_init(instance, module);
}

let __wbg_init_promise;
async function __wbg_init(module_or_path) {
    if (wasm !== undefined) return wasm;
    if (__wbg_init_promise === undefined) {
        __wbg_init_promise = __wbg_init_once(module_or_path);
        __wbg_init_promise.catch(() => { __wbg_init_promise = undefined; });
    }
    return __wbg_init_promise;
}

async function __wbg_init_once(module_or_path) {

    if (module_or_path !== undefined) {
        if (Object.getPrototypeOf(module_or_path) === Object.prototype) {
            ({module_or_path} = module_or_path)
        } else {
            console.warn('using deprecated parameters for the initialization function; pass a single object instead')
        }
    }

    if (module_or_path === undefined) {
        module_or_path = new URL('sluicegate_wasm_bg.wasm', import.meta.url);
    }
    const imports = __wbg_get_imports();

    if (typeof module_or_path === 'string' || (typeof Request === 'function' && module_or_path instanceof Request) || (typeof URL === 'function' && module_or_path instanceof URL)) {
        module_or_path = fetch(module_or_path);
    }

    const { instance, module } = await __wbg_load(await module_or_path, imports);

    return __wbg_finalize_init(instance, module);
}

export { initSync, __wbg_init as default };
