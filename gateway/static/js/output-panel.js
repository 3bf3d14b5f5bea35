// The run page's output panel: the current attempt's output text, followed over the
// gateway's output stream until the run ends. Output is not in the event log: the stream
// reads the output store by byte offset and resumes from the last message id by itself.

import { paths } from './api.js';
import { h } from './dom.js';
import { openStream } from './stream.js';

// What the panel keeps: enough to read, not a whole 16 MB log in the page. Past it the
// oldest text goes (the CLI and the REST route have all of it).
const MAX_CHARS = 1_000_000;
const NOTE_KINDS = new Set(['OUTPUT_CHUNK_KIND_SKIPPED', 'OUTPUT_CHUNK_KIND_TRUNCATED']);

export function outputPanel(ctx, runId) {
  const label = h('span', { class: 'output-attempt muted', id: 'output-attempt' });
  const status = h('p', { class: 'muted output-status', id: 'output-status' }, 'No output yet.');
  const pre = h('pre', {
    class: 'output',
    id: 'run-output',
    // Focusable so the keyboard can scroll it; a log, but not read out line by line.
    tabindex: '0',
    role: 'log',
    'aria-live': 'off',
    'aria-labelledby': 'output-h',
    'aria-describedby': 'output-status',
  });
  const element = h(
    'section',
    { 'aria-labelledby': 'output-h', class: 'output-panel' },
    h('h2', { id: 'output-h' }, 'Output ', label),
    status,
    pre,
  );

  let chars = 0;
  const trim = () => {
    while (chars > MAX_CHARS && pre.firstChild) {
      chars -= pre.firstChild.textContent.length;
      pre.firstChild.remove();
    }
  };

  const append = (chunk) => {
    // Follow the end only when the reader is already there: scrolling up to read stays put.
    const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 4;
    const text = chunk.text || '';
    // A follow that reads again past the cap is told "still truncated" with no text: the
    // note is already shown once, an empty one would only be a second, blank note.
    if (!text) return;
    pre.append(NOTE_KINDS.has(chunk.kind) ? h('span', { class: 'output-note' }, text) : text);
    chars += text.length;
    trim();
    status.hidden = true;
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };

  const stream = openStream(paths.outputStream(ctx.project, runId), {
    kinds: ['attempt', 'output', 'end'],
    onEvent: (data, id, kind) => {
      if (kind === 'attempt') {
        // A new attempt's output starts from its beginning.
        pre.replaceChildren();
        chars = 0;
        label.textContent = `attempt ${data.attempt_no}`;
        status.textContent = 'No output yet.';
        status.hidden = false;
      } else if (kind === 'output') {
        append(data);
      } else if (kind === 'end') {
        stream.close(); // the run ended and everything was read: nothing more will come
        element.dataset.ended = 'true';
        if (!pre.firstChild) status.textContent = 'No output.';
      }
    },
  });
  return { element, dispose: () => stream.close() };
}
