// simulmt captions page: streams typed/pasted text to this server (simulmt.v1) and shows
// committed words in full colour and the tentative tail greyed. Server text is inserted with
// textContent only. When the connection drops, the page reconnects and resumes its session:
// the server replays the messages it missed (by seq) and says how many of the page's frames it
// received, and the page sends the rest again. If the session cannot be resumed (its server
// stopped, the resume window passed), a new session gets the words that have no final yet.
// The server's token (if it has one) goes in the `start` frame, never in a URL (proxies log
// URLs): the page takes it from its field, or from the page's #token=… fragment, which
// browsers never send, and removes it from the address bar.
"use strict";

(() => {
  const PROTOCOL = "simulmt.v1";
  const MAX_SENTENCES = 300; // older caption lines are dropped from the page
  const RETRY_CODES = new Set([1001, 1005, 1006, 1011, 1012, 1013, 1014]); // worth reconnecting
  const NEW_SESSION_ERRORS = new Set(["shutting_down", "resume_failed", "internal", "idle_timeout"]);
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const TOKEN_KEY = "simulmt.token"; // kept for this tab only (sessionStorage)

  const state = {
    ws: null,
    generation: 0, // +1 per connection: events of an old socket are ignored
    queue: [], // words not yet sent
    words: [], // words sent, in order; the first `confirmed` have their final
    confirmed: 0,
    session: null, // {id, token, route, lastSeq, frames, base, wordsBase, endSent}
    live: false, // this connection has its session
    fatal: null, // the fatal error of this connection
    failures: 0, // connections in a row that got no session
    pump: null, // timer of the word pump
    retryTimer: null,
    restartAfterEnd: false, // the policy changed: open a new session once this one ended
    sentences: new Map(), // "session:sentence_id" -> {root, committed, tentative}
  };

  function setStatus(text, kind) {
    const el = $("status");
    el.textContent = text;
    el.className = "status " + (kind || "");
  }

  function wsUrl() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const query = new URLSearchParams();
    if (state.session && state.session.route) query.set("route", state.session.route);
    const q = query.toString();
    return `${proto}//${location.host}/ws` + (q ? "?" + q : "");
  }

  function isOpen() {
    return state.ws !== null && state.ws.readyState === WebSocket.OPEN && state.live;
  }

  // every frame after `start` is logged until the server surely has it: a resume resends
  function sendFrame(msg, words) {
    if (!isOpen()) return false;
    const text = JSON.stringify(msg);
    state.session.frames.push({ text, n: words });
    state.ws.send(text);
    return true;
  }

  function connect() {
    if (state.ws !== null && state.ws.readyState <= WebSocket.OPEN) return;
    clearTimeout(state.retryTimer);
    state.generation += 1;
    state.live = false;
    state.fatal = null;
    const generation = state.generation;
    setStatus(state.session ? "reconnecting…" : "connecting…", "wait");
    const ws = new WebSocket(wsUrl());
    state.ws = ws;
    ws.onopen = () => {
      const beam = Math.max(1, parseInt($("beam").value, 10) || 1);
      const start = { type: "start", protocol: PROTOCOL, policy: $("policy").value.trim(), beam };
      // sentence ends are the server's: auto (its boundary detector) unless the page's URL
      // asks for ?segmentation=punctuation|client (and ?segment_lookahead=N for auto)
      if (params.get("segmentation")) start.segmentation = params.get("segmentation");
      const lookahead = params.get("segment_lookahead") || params.get("lookahead"); // old name
      if (lookahead) start.segment_lookahead = parseInt(lookahead, 10);
      // ?input_kind=recognizer: the words are a speech recognizer's (lowercase, no
      // punctuation); the server restores case and commas before translating them
      const inputKind = params.get("input_kind") || params.get("input"); // old name
      if (inputKind) start.input_kind = inputKind;
      const token = $("token").value.trim();
      if (token) start.token = token; // the server's token: in the frame, not the URL
      const s = state.session;
      if (s) start.resume = { session_id: s.id, token: s.token, last_seq: s.lastSeq };
      ws.send(JSON.stringify(start));
    };
    ws.onmessage = (event) => onMessage(generation, JSON.parse(event.data));
    ws.onclose = (event) => onClose(generation, event);
  }

  function abandon() {
    // a new session takes the words that have no final; the old open sentence stays greyed
    for (const s of state.sentences.values()) {
      if (!s.final) {
        s.tentative.textContent = "";
        s.root.classList.add("interrupted");
      }
    }
    state.queue = state.words.slice(state.confirmed).concat(state.queue);
    state.words = state.words.slice(0, state.confirmed);
    state.session = null;
  }

  function retry() {
    state.failures += 1;
    if (state.session && state.failures > 3) abandon(); // its server is gone
    const wait = Math.min(250 * 2 ** state.failures, 10000);
    setStatus(`connection lost; reconnecting in ${wait / 1000} s`, "wait");
    state.retryTimer = setTimeout(connect, wait);
  }

  function onClose(generation, event) {
    if (generation !== state.generation) return;
    stopPump();
    if (state.live) state.failures = 0;
    const fatal = state.fatal;
    if (event.code === 1000) {
      state.session = null;
      if (state.restartAfterEnd) {
        state.restartAfterEnd = false;
        connect();
      } else {
        setStatus("session ended — press Stream to start a new one", "");
      }
    } else if ((fatal && NEW_SESSION_ERRORS.has(fatal.code)) || event.code === 1013) {
      abandon();
      retry();
    } else if (!fatal && RETRY_CODES.has(event.code)) {
      retry();
    } else if (!$("status").classList.contains("error")) {
      setStatus(`closed (${event.code} ${event.reason})`, "error");
    }
  }

  function onMessage(generation, msg) {
    if (generation !== state.generation) return;
    const s = state.session;
    if (msg.type === "error" && msg.fatal) state.fatal = msg;
    if (msg.type !== "session" && s && typeof msg.seq === "number") {
      if (msg.seq <= s.lastSeq && msg.type !== "error") return; // seen before the drop
      if (msg.seq > s.lastSeq + 1 && msg.type !== "error") console.warn("seq gap", s.lastSeq, msg.seq);
    }
    if (s && typeof msg.seq === "number" && msg.seq > s.lastSeq) s.lastSeq = msg.seq;
    switch (msg.type) {
      case "session":
        onSession(msg);
        break;
      case "partial":
        renderPartial(msg);
        break;
      case "final":
        renderFinal(msg);
        state.confirmed += String(msg.source).split(/\s+/).filter(Boolean).length;
        trimFrames();
        break;
      case "error":
        setStatus(`error ${msg.code}: ${msg.message}`, msg.fatal ? "error" : "wait");
        if (msg.code === "unauthorized") $("token").focus();
        break;
      case "end":
        setStatus(`session ended after ${msg.sentences} sentences`, "");
        break;
      default:
        console.warn("unknown message", msg.type); // a newer server's: ignored
    }
  }

  function onSession(msg) {
    state.live = true;
    state.failures = 0;
    if (msg.resumed) {
      const s = state.session;
      s.lastSeq = msg.seq;
      for (const f of s.frames.slice(Math.max(0, msg.resumed.received - s.base))) {
        state.ws.send(f.text); // frames the server never received
      }
      setStatus(`resumed · ${msg.model} · session ${msg.session_id}`, "ok");
    } else {
      const resume = msg.resume || {};
      state.session = {
        id: msg.session_id, token: resume.token, route: resume.route || null,
        lastSeq: msg.seq, frames: [], base: 0, wordsBase: 0, endSent: false,
      };
      setStatus(`connected · ${msg.model} · session ${msg.session_id}`, "ok");
    }
    startPump();
  }

  function trimFrames() {
    const s = state.session;
    if (!s) return;
    let end = s.wordsBase;
    let last = -1;
    s.frames.forEach((f, i) => {
      end += f.n;
      if (f.n > 0 && end <= state.confirmed) last = i;
    });
    if (last < 0) return;
    for (const f of s.frames.splice(0, last + 1)) s.wordsBase += f.n;
    s.base += last + 1;
  }

  function sentenceFor(id) {
    const key = `${state.session ? state.session.id : ""}:${id}`;
    let s = state.sentences.get(key);
    if (s === undefined) {
      const root = document.createElement("p");
      root.className = "sentence";
      root.dataset.sentenceId = String(id);
      const committed = document.createElement("span");
      committed.className = "committed";
      const tentative = document.createElement("span");
      tentative.className = "tentative";
      root.append(committed, tentative);
      $("captions").append(root);
      s = { root, committed, tentative, final: false };
      state.sentences.set(key, s);
      trimSentences();
    }
    return s;
  }

  function trimSentences() {
    while (state.sentences.size > MAX_SENTENCES) {
      const [key, s] = state.sentences.entries().next().value;
      s.root.remove();
      state.sentences.delete(key);
    }
  }

  function scrollDown() {
    const box = $("captions");
    box.scrollTop = box.scrollHeight;
  }

  function renderPartial(msg) {
    const s = sentenceFor(msg.sentence_id);
    s.committed.textContent += String(msg.committed_delta);
    s.tentative.textContent = String(msg.tentative);
    scrollDown();
  }

  function renderFinal(msg) {
    const s = sentenceFor(msg.sentence_id);
    s.committed.textContent = String(msg.text);
    s.tentative.textContent = "";
    s.final = true;
    s.root.classList.add("final");
    scrollDown();
  }

  // ---- sending: one word per 1/rate seconds, or everything at once for rate 0 ----
  function rate() {
    const r = parseFloat($("rate").value);
    return Number.isFinite(r) && r > 0 ? r : 0;
  }

  function sendWords(words) {
    if (words.length === 0) return;
    if (sendFrame({ type: "source", text: words.join(" ") }, words.length)) {
      state.words.push(...words);
    } else {
      state.queue.unshift(...words);
    }
  }

  function pumpOnce() {
    if (!isOpen() || state.queue.length === 0) {
      stopPump();
      return;
    }
    sendWords(rate() > 0 ? state.queue.splice(0, 1) : state.queue.splice(0));
    state.pump = setTimeout(pumpOnce, rate() > 0 ? 1000 / rate() : 0);
  }

  function startPump() {
    if (state.pump === null && state.queue.length > 0) pumpOnce();
  }

  function stopPump() {
    clearTimeout(state.pump);
    state.pump = null;
  }

  function onSubmit(event) {
    event.preventDefault();
    const words = $("source").value.split(/\s+/).filter(Boolean);
    if (words.length === 0) return;
    state.queue.push(...words);
    $("source").value = "";
    if (isOpen()) startPump();
    else connect();
  }

  function onSettingsChange() {
    if (isOpen()) {
      state.restartAfterEnd = true;
      sendFrame({ type: "end" }, 0);
    }
  }

  // the token from #token=… (or an old ?token=… link) into the field, and out of the address bar
  function takeToken() {
    const hash = new URLSearchParams(location.hash.slice(1));
    const given = hash.get("token") || params.get("token");
    if (given) {
      sessionStorage.setItem(TOKEN_KEY, given);
      params.delete("token");
      const q = params.toString();
      history.replaceState(null, "", location.pathname + (q ? "?" + q : ""));
    }
    $("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
    $("token").addEventListener("change", () => {
      sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
      if (state.fatal && state.fatal.code === "unauthorized") connect();
    });
  }

  function init() {
    takeToken();
    if (params.get("policy")) $("policy").value = params.get("policy");
    $("controls").addEventListener("submit", onSubmit);
    $("flush").addEventListener("click", () => sendFrame({ type: "flush" }, 0));
    $("end").addEventListener("click", () => {
      state.queue = [];
      sendFrame({ type: "end" }, 0);
    });
    $("clear").addEventListener("click", () => {
      $("captions").replaceChildren();
      state.sentences.clear();
    });
    $("policy").addEventListener("change", onSettingsChange);
    $("beam").addEventListener("change", onSettingsChange);
    connect();
  }

  document.addEventListener("DOMContentLoaded", init);
})();
