// Background (Chromium: service worker; Firefox: event page): relays the content script's calls to the native
// host `org.tokenbridge.uaf` (tokenbridge browser-host) over runtime.connectNative, one port for every tab.
// The origin sent is the browser's: the calling document's (MessageSender.origin, else its url's origin);
// a frame whose origin is not its tab's top-level origin is refused.
"use strict";
const api = globalThis.browser || globalThis.chrome;
const HOST = "org.tokenbridge.uaf";
const METHODS = ["discover", "checkPolicy", "processUAFOperation", "notifyUAFResult"];
// ErrorCode (UAF Application API v1.1 §4.5).
const INSECURE_TRANSPORT = 0x02;
const PROTOCOL_ERROR = 0x06;
const UNTRUSTED_FACET_ID = 0x07;
const UNKNOWN = 0xff;

let port = null;
let nextId = 1;
// Calls sent to the host and not answered yet: host id → resolve. The host answers each id once.
const pending = new Map();

function connect() {
  if (port) return port;
  const p = api.runtime.connectNative(HOST);
  p.onMessage.addListener((reply) => {
    const resolve = reply && pending.get(reply.id);
    if (!resolve) return;
    pending.delete(reply.id);
    resolve(reply);
  });
  p.onDisconnect.addListener(() => {
    if (port === p) port = null;
    for (const resolve of pending.values()) resolve({ errorCode: UNKNOWN });
    pending.clear();
  });
  port = p;
  return p;
}

function originOf(url) {
  try {
    const u = new URL(url);
    return u.protocol === "https:" || u.protocol === "http:" ? u.origin : null;
  } catch (e) {
    return null;
  }
}

// The caller's origin as the browser knows it, or the ErrorCode that refuses it.
function callerOrigin(sender) {
  const origin = sender.origin && sender.origin !== "null" ? sender.origin : originOf(sender.url);
  if (!origin) return { errorCode: UNTRUSTED_FACET_ID };
  if (!origin.startsWith("https://")) return { errorCode: INSECURE_TRANSPORT };
  if (sender.frameId !== 0) {
    const top = sender.tab && sender.tab.url ? originOf(sender.tab.url) : null;
    if (top !== origin) return { errorCode: UNTRUSTED_FACET_ID };
  }
  return { origin };
}

// The call for the host, or the ErrorCode that refuses it.
function prepare(message, sender) {
  if (!message || sender.id !== api.runtime.id || !METHODS.includes(message.method)) {
    return { errorCode: PROTOCOL_ERROR };
  }
  const caller = callerOrigin(sender);
  if (!caller.origin) return caller;
  const call = { id: nextId++, method: message.method, origin: caller.origin };
  if (message.method !== "discover") {
    if (typeof message.uafProtocolMessage !== "string") return { errorCode: PROTOCOL_ERROR };
    call.uafProtocolMessage = message.uafProtocolMessage;
  }
  if (message.method === "notifyUAFResult") {
    if (!Number.isInteger(message.responseCode)) return { errorCode: PROTOCOL_ERROR };
    call.responseCode = message.responseCode;
  }
  return call;
}

// Sends a call to the host; resolves with its answer (without the host's id).
function send(call) {
  return new Promise((resolve) => {
    pending.set(call.id, (reply) => {
      const { id, ...rest } = reply;
      resolve(rest);
    });
    try {
      connect().postMessage(call);
    } catch (e) {
      pending.delete(call.id);
      port = null;
      resolve({ errorCode: UNKNOWN });
    }
  });
}

// The document that made `call` is gone: the host closes its request (the service ends a PIN dialog).
function abandon(call) {
  if (!pending.delete(call.id) || call.method !== "processUAFOperation" || !port) return;
  try {
    port.postMessage({ id: nextId++, method: "cancel", cancels: call.id });
  } catch (e) {
    // The host is gone too: nothing is left to cancel.
  }
}

api.runtime.onConnect.addListener((p) => {
  if (p.name !== "tokenbridge-uaf" || !p.sender) return;
  let call = null;
  let connected = true;
  p.onDisconnect.addListener(() => {
    connected = false;
    if (call) abandon(call);
  });
  p.onMessage.addListener((message) => {
    if (call) return; // one call per port
    const prepared = prepare(message, p.sender);
    if (prepared.id === undefined) {
      p.postMessage(prepared);
      return;
    }
    call = prepared;
    send(call).then((reply) => {
      if (connected) p.postMessage(reply);
    });
  });
});
