// The extension's content script (isolated world): passes calls of page.js to the background script (a port
// per call) and its answers back. It forwards only the call's method and UAF fields; the background takes the origin from the
// browser's record of this document (runtime.MessageSender), never from here.
(() => {
  "use strict";
  const api = globalThis.browser || globalThis.chrome;
  const REQUEST = "tokenbridge-uaf-request";
  const REPLY = "tokenbridge-uaf-reply";
  const UNKNOWN = 0xff;
  // Calls not answered yet. A document leaving (pagehide, also into the back-forward cache, where Firefox keeps
  // its ports open) closes them, which cancels them.
  const open = new Set();
  window.addEventListener("pagehide", () => {
    for (const p of open) p.disconnect();
    open.clear();
  });

  window.addEventListener("message", (event) => {
    const d = event.data;
    if (event.source !== window || !d || d.channel !== REQUEST) return;
    const call = {
      type: "tokenbridge-uaf",
      method: String(d.method),
      uafProtocolMessage: typeof d.uafProtocolMessage === "string" ? d.uafProtocolMessage : undefined,
      responseCode: Number.isInteger(d.responseCode) ? d.responseCode : undefined,
    };
    const answer = (reply) =>
      window.postMessage({ channel: REPLY, callId: d.callId, reply }, window.location.origin);
    // One port per call: when this document goes away (tab closed, navigation) the port closes and the
    // background cancels the call (a PIN dialog still open is closed).
    let port;
    try {
      port = api.runtime.connect({ name: "tokenbridge-uaf" });
    } catch (e) {
      answer({ errorCode: UNKNOWN }); // the extension was reloaded or removed
      return;
    }
    let done = false;
    open.add(port);
    port.onMessage.addListener((reply) => {
      if (done) return;
      done = true;
      open.delete(port);
      answer(reply && typeof reply.errorCode === "number" ? reply : { errorCode: UNKNOWN });
      port.disconnect();
    });
    port.onDisconnect.addListener(() => {
      open.delete(port);
      if (done) return;
      done = true;
      answer({ errorCode: UNKNOWN });
    });
    port.postMessage(call);
  });
})();
