// The extension's content script (isolated world): passes calls of page.js to the background script and its
// answers back. It forwards only the call's method and UAF fields; the background takes the origin from the
// browser's record of this document (runtime.MessageSender), never from here.
(() => {
  "use strict";
  const api = globalThis.browser || globalThis.chrome;
  const REQUEST = "tokenbridge-uaf-request";
  const REPLY = "tokenbridge-uaf-reply";
  const UNKNOWN = 0xff;

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
    let sent;
    try {
      sent = api.runtime.sendMessage(call);
    } catch (e) {
      answer({ errorCode: UNKNOWN }); // the extension was reloaded or removed
      return;
    }
    Promise.resolve(sent).then(
      (reply) => answer(reply && typeof reply.errorCode === "number" ? reply : { errorCode: UNKNOWN }),
      () => answer({ errorCode: UNKNOWN }),
    );
  });
})();
