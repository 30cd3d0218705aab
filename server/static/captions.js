// simulmt captions page: streams typed/pasted text to this server (simulmt.v1) and shows
// committed words in full colour and the tentative tail greyed. Server text is inserted with
// textContent only. The connection is re-opened with backoff when it drops; words sent but not
// yet translated are sent again on the new session.
"use strict";

(() => {
  const PROTOCOL = "simulmt.v1";
  const MAX_SENTENCES = 300; // older caption lines are dropped from the page
  const RETRY_CODES = new Set([1001, 1006, 1011, 1012, 1013, 1014]); // worth reconnecting
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);

  const state = {
    ws: null,
    generation: 0, // +1 per connection: sentence ids restart on each session
    queue: [], // words not yet sent
    unconfirmed: [], // words sent on this session whose sentence has no final yet
    pump: null, // timer of the word pump
    retryMs: 500,
    retryTimer: null,
    restartAfterEnd: false, // the policy changed: open a new session once this one ended
    lastSeq: 0,
    sentences: new Map(), // "generation:sentence_id" -> {root, committed, tentative}
  };

  function setStatus(text, kind) {
    const el = $("status");
    el.textContent = text;
    el.className = "status " + (kind || "");
  }

  function wsUrl() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const token = params.get("token");
    return `${proto}//${location.host}/ws` + (token ? "?token=" + encodeURIComponent(token) : "");
  }

  function isOpen() {
    return state.ws !== null && state.ws.readyState === WebSocket.OPEN;
  }

  function send(msg) {
    if (isOpen()) state.ws.send(JSON.stringify(msg));
  }

  function connect() {
    if (state.ws !== null && state.ws.readyState <= WebSocket.OPEN) return;
    clearTimeout(state.retryTimer);
    state.generation += 1;
    state.lastSeq = 0;
    const generation = state.generation;
    setStatus("connecting…", "wait");
    const ws = new WebSocket(wsUrl());
    state.ws = ws;
    ws.onopen = () => {
      const beam = Math.max(1, parseInt($("beam").value, 10) || 1);
      send({ type: "start", protocol: PROTOCOL, policy: $("policy").value.trim(), beam });
      // words of a sentence the last session never finished go out again first
      state.queue = state.unconfirmed.concat(state.queue);
      state.unconfirmed = [];
    };
    ws.onmessage = (event) => onMessage(generation, JSON.parse(event.data));
    ws.onclose = (event) => onClose(generation, event);
  }

  function onClose(generation, event) {
    if (generation !== state.generation) return;
    stopPump();
    for (const s of state.sentences.values()) {
      if (s.generation === generation && !s.final) {
        s.tentative.textContent = "";
        s.root.classList.add("interrupted");
      }
    }
    if (event.code === 1000 && state.restartAfterEnd) {
      state.restartAfterEnd = false;
      connect();
    } else if (event.code === 1000) {
      setStatus("session ended — press Stream to start a new one", "");
    } else if (RETRY_CODES.has(event.code) || event.code === 1005) {
      const wait = state.retryMs;
      state.retryMs = Math.min(state.retryMs * 2, 10000);
      setStatus(`connection lost (${event.code}); reconnecting in ${wait / 1000} s`, "wait");
      state.retryTimer = setTimeout(connect, wait);
    } else if (!$("status").classList.contains("error")) {
      setStatus(`closed (${event.code} ${event.reason})`, "error");
    }
  }

  function onMessage(generation, msg) {
    if (generation !== state.generation) return;
    if (typeof msg.seq === "number") {
      if (msg.seq !== state.lastSeq + 1) console.warn("seq gap", state.lastSeq, msg.seq);
      state.lastSeq = msg.seq;
    }
    switch (msg.type) {
      case "session":
        state.retryMs = 500;
        setStatus(`connected · ${msg.model} · session ${msg.session_id}`, "ok");
        startPump();
        break;
      case "partial":
        renderPartial(generation, msg);
        break;
      case "final":
        renderFinal(generation, msg);
        state.unconfirmed.splice(0, String(msg.source).split(/\s+/).filter(Boolean).length);
        break;
      case "error":
        setStatus(`error ${msg.code}: ${msg.message}`, msg.fatal ? "error" : "wait");
        break;
      case "end":
        setStatus(`session ended after ${msg.sentences} sentences`, "");
        break;
      default:
        console.warn("unknown message", msg.type);
    }
  }

  function sentenceFor(generation, id) {
    const key = `${generation}:${id}`;
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
      s = { root, committed, tentative, generation, final: false };
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

  function renderPartial(generation, msg) {
    const s = sentenceFor(generation, msg.sentence_id);
    s.committed.textContent += String(msg.committed_delta);
    s.tentative.textContent = String(msg.tentative);
    scrollDown();
  }

  function renderFinal(generation, msg) {
    const s = sentenceFor(generation, msg.sentence_id);
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
    send({ type: "source", text: words.join(" ") });
    state.unconfirmed.push(...words);
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
      send({ type: "end" });
    }
  }

  function init() {
    if (params.get("policy")) $("policy").value = params.get("policy");
    $("controls").addEventListener("submit", onSubmit);
    $("flush").addEventListener("click", () => send({ type: "flush" }));
    $("end").addEventListener("click", () => {
      state.queue = [];
      send({ type: "end" });
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
