// navigator.fido.uaf in the page's own world: the FIDO UAF DOM API (UAF Application API and Transport Binding
// v1.1 §5). It only relays: each call goes by window.postMessage to bridge.js (the extension's isolated world),
// which hands it to the extension; nothing the page passes here decides the origin (the browser gives that).
(() => {
  "use strict";
  if (window.navigator.fido && window.navigator.fido.uaf) return;

  // ErrorCode (§4.5).
  const INSECURE_TRANSPORT = 0x02;
  const PROTOCOL_ERROR = 0x06;
  const UNKNOWN = 0xff;
  const REQUEST = "tokenbridge-uaf-request";
  const REPLY = "tokenbridge-uaf-reply";

  // §5.7.1: a document not loaded over https (or with insecure content) gets INSECURE_TRANSPORT at once and
  // nothing else happens. http://localhost too: a relying party is reached over https.
  const insecure = () => window.location.protocol !== "https:" || !window.isSecureContext;

  const calls = new Map();
  let next = 1;
  window.addEventListener("message", (event) => {
    if (event.source !== window || !event.data || event.data.channel !== REPLY) return;
    const done = calls.get(event.data.callId);
    if (!done) return;
    calls.delete(event.data.callId);
    done(event.data.reply || { errorCode: UNKNOWN });
  });

  const later = (f) => Promise.resolve().then(f);
  const invoke = (callback, value) => {
    if (typeof callback === "function") callback(value);
  };

  // Sends one call; `onReply` gets the extension's answer ({errorCode, ...}).
  function send(method, fields, onReply) {
    if (insecure()) {
      later(() => onReply({ errorCode: INSECURE_TRANSPORT }));
      return;
    }
    const callId = next++;
    calls.set(callId, onReply);
    window.postMessage(Object.assign({ channel: REQUEST, callId, method }, fields), window.location.origin);
  }

  // A UAFMessage (§4.1): uafProtocolMessage is required; additionalData is the page's own and stays here.
  function protocolMessage(message) {
    if (!message || typeof message !== "object" || typeof message.uafProtocolMessage !== "string") return null;
    return message.uafProtocolMessage;
  }

  const uaf = {
    discover(completionCallback, errorCallback) {
      send("discover", {}, (r) => {
        if (r.errorCode === 0 && r.discoveryData) invoke(completionCallback, r.discoveryData);
        else invoke(errorCallback, r.errorCode || UNKNOWN);
      });
    },
    checkPolicy(message, cb) {
      const m = protocolMessage(message);
      if (m === null && !insecure()) return later(() => invoke(cb, PROTOCOL_ERROR));
      send("checkPolicy", { uafProtocolMessage: m }, (r) => invoke(cb, r.errorCode));
    },
    processUAFOperation(message, completionCallback, errorCallback) {
      const m = protocolMessage(message);
      if (m === null && !insecure()) return later(() => invoke(errorCallback, PROTOCOL_ERROR));
      send("processUAFOperation", { uafProtocolMessage: m }, (r) => {
        if (r.errorCode === 0 && typeof r.uafProtocolMessage === "string") {
          invoke(completionCallback, { uafProtocolMessage: r.uafProtocolMessage });
        } else {
          invoke(errorCallback, r.errorCode || UNKNOWN);
        }
      });
    },
    notifyUAFResult(responseCode, uafResponse) {
      const m = protocolMessage(uafResponse);
      if (m === null || !Number.isInteger(responseCode) || responseCode < 0) return;
      send("notifyUAFResult", { uafProtocolMessage: m, responseCode }, () => {});
    },
  };

  const fido = Object.freeze({ uaf: Object.freeze(uaf) });
  Object.defineProperty(window.navigator, "fido", { value: fido, enumerable: true });
})();
