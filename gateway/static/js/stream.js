// Server-Sent Events read with fetch() rather than EventSource: fetch can send the bearer
// token as a header (no token in URLs and logs) and resume with a Last-Event-ID header after
// any failure, with a backoff that EventSource does not let us choose.

import { reportUnauthorized } from './api.js';
import { token } from './auth.js';

const statusListeners = new Set();
let openStreams = 0;
let failing = 0;

// One connection indicator for the whole app: live while every open stream is connected.
export function onStreamStatus(listener) {
  statusListeners.add(listener);
}

function publish() {
  const status = openStreams === 0 ? 'idle' : failing > 0 ? 'reconnecting' : 'live';
  for (const listener of statusListeners) listener(status);
}

function parseBlock(block) {
  const message = { event: 'message', data: [], id: null, retry: null };
  for (const line of block.split(/\r\n|\r|\n/)) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') message.event = value;
    else if (field === 'data') message.data.push(value);
    else if (field === 'id') message.id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) message.retry = Number(value);
  }
  return message;
}

// Opens the stream at `url`; calls onEvent(data, id, kind) for each message whose event is
// one of `kinds` (run events by default), onConnect() each time the stream is
// (re)established, so the caller can re-read what it shows, and onStatus(connected) when that
// changes. Returns { close }.
export function openStream(url, { onEvent, onConnect, onStatus, kinds = ['run_event', 'message'] }) {
  let lastId = null;
  let stopped = false;
  let controller = null;
  let connected = false;
  openStreams += 1;
  failing += 1;
  publish();

  const setConnected = (value) => {
    if (value === connected || stopped) return;
    connected = value;
    failing += value ? -1 : 1;
    publish();
    if (onStatus) onStatus(value);
  };

  async function readOnce() {
    controller = new AbortController();
    const headers = { Accept: 'text/event-stream' };
    if (token()) headers.Authorization = `Bearer ${token()}`;
    if (lastId !== null) headers['Last-Event-ID'] = lastId;
    const response = await fetch(url, { headers, cache: 'no-store', signal: controller.signal });
    if (response.status === 401) {
      reportUnauthorized();
      throw new Error('unauthorized');
    }
    if (!response.ok || !response.body) throw new Error(`stream answered ${response.status}`);
    setConnected(true);
    if (onConnect) onConnect();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let boundary;
      while ((boundary = buffer.search(/\r\n\r\n|\n\n|\r\r/)) >= 0) {
        const block = buffer.slice(0, boundary);
        buffer = buffer.slice(boundary).replace(/^(\r\n\r\n|\n\n|\r\r)/, '');
        const message = parseBlock(block);
        if (message.id !== null) lastId = message.id;
        if (message.retry !== null) retryMs = message.retry;
        if (message.data.length === 0) continue;
        if (!kinds.includes(message.event)) continue;
        let event;
        try {
          event = JSON.parse(message.data.join('\n'));
        } catch {
          continue;
        }
        onEvent(event, message.id, message.event);
      }
    }
  }

  let retryMs = 500;
  (async () => {
    let delay = retryMs;
    while (!stopped) {
      try {
        await readOnce();
        delay = retryMs;
      } catch {
        delay = Math.min(Math.max(delay * 2, retryMs), 10000);
      }
      if (stopped) return;
      setConnected(false);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  })();

  return {
    close() {
      if (stopped) return;
      if (!connected) failing -= 1;
      stopped = true;
      openStreams -= 1;
      if (controller) controller.abort();
      publish();
    },
  };
}
