// The run page's log panel: the current attempt's output as monospace text, followed over
// the gateway's output stream until the run ends. It follows the end while the reader is
// there and stays put once they scroll up ("Jump to latest" brings them back); search marks
// every match (next / previous, "2 of 5"); Download saves the attempt's whole output, read
// page by page from the REST route, as a .log file. Output is not in the event log: the
// stream reads the output store by byte offset and resumes from the last message id.

import { api, paths } from './api.js';
import { h, shortId } from './dom.js';
import { highlighted } from './log-search.js';
import { openStream } from './stream.js';

// What the panel keeps: enough to read, not a whole 16 MB log in the page. Past it the
// oldest text goes (Download, the CLI and the REST route have all of it).
const MAX_CHARS = 1_000_000;
const NOTE_KINDS = new Set(['OUTPUT_CHUNK_KIND_SKIPPED', 'OUTPUT_CHUNK_KIND_TRUNCATED']);
const DOWNLOAD_PAGES = 10_000; // a bound on the pages one download reads

// Every page of one attempt's output, from offset 0 to what is stored.
async function wholeOutput(ctx, runId, attemptId) {
  let offset = 0;
  let text = '';
  for (let page = 0; page < DOWNLOAD_PAGES; page += 1) {
    const answer = await api(paths.output(ctx.project, runId), { query: { attempt_id: attemptId, offset } });
    for (const chunk of answer.chunks || []) text += chunk.text || '';
    const next = Number(answer.next_offset || 0);
    if (next <= offset || next >= Number(answer.stored_bytes || 0)) break;
    offset = next;
  }
  return text;
}

export function outputPanel(ctx, runId) {
  const label = h('span', { class: 'output-attempt muted', id: 'output-attempt' });
  const status = h('p', { class: 'muted output-status', id: 'output-status' }, 'No output yet.');
  const capped = h('span', { class: 'output-capped', id: 'output-capped', hidden: true }, 'output capped: later output was not stored');
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
  const search = h('input', { type: 'search', id: 'log-search', placeholder: 'Search the output', 'aria-label': 'Search the output', autocomplete: 'off' });
  const count = h('span', { class: 'log-count muted', id: 'log-count', 'aria-live': 'polite' });
  const prev = h('button', { type: 'button', id: 'log-prev', disabled: true, 'aria-label': 'Previous match' }, '↑ Prev');
  const next = h('button', { type: 'button', id: 'log-next', disabled: true, 'aria-label': 'Next match' }, '↓ Next');
  const download = h('button', { type: 'button', id: 'log-download', disabled: true }, 'Download .log');
  const jump = h('button', { type: 'button', id: 'log-jump', hidden: true }, 'Jump to latest');
  const follow = h('span', { class: 'log-follow muted', id: 'log-follow' }, '');
  const element = h(
    'section',
    { 'aria-labelledby': 'output-h', class: 'output-panel' },
    h('h2', { id: 'output-h' }, 'Output ', label),
    h('div', { class: 'log-tools', role: 'group', 'aria-label': 'Output tools' }, search, prev, next, count, download, follow, jump, capped),
    status,
    pre,
  );

  let segments = []; // { text, note } in order; neighbouring text segments are one
  let chars = 0;
  let attempt = { id: '', no: 0 };
  let query = '';
  let marks = [];
  let current = -1;
  let following = true;
  let ended = false;

  const showFollow = () => {
    follow.textContent = ended ? 'run ended' : following ? 'following' : 'paused (scrolled up)';
    jump.hidden = following || ended;
  };
  const atBottom = () => pre.scrollHeight - pre.scrollTop - pre.clientHeight < 4;
  pre.addEventListener('scroll', () => {
    following = atBottom();
    showFollow();
  });
  jump.addEventListener('click', () => {
    pre.scrollTop = pre.scrollHeight;
    following = true;
    showFollow();
  });

  const select = (index) => {
    if (marks[current]) marks[current].classList.remove('current');
    current = marks.length ? (index + marks.length) % marks.length : -1;
    const mark = marks[current];
    if (mark) {
      mark.classList.add('current');
      // Into view inside the log only: the page itself does not jump.
      pre.scrollTop = mark.offsetTop - pre.offsetTop - pre.clientHeight / 2;
      following = atBottom();
      showFollow();
    }
    count.textContent = !query ? '' : marks.length ? `${current + 1} of ${marks.length}` : 'no matches';
    prev.disabled = next.disabled = marks.length === 0;
  };

  // Writes the whole log again (with the marks) when searching; a search keeps its place.
  const render = () => {
    const result = highlighted(segments, query);
    pre.replaceChildren(...result.nodes);
    marks = result.marks;
    select(Math.min(Math.max(current, 0), marks.length - 1));
  };

  const trim = () => {
    while (chars > MAX_CHARS && segments.length > 1) {
      chars -= segments.shift().text.length;
    }
  };

  const append = (chunk) => {
    const text = chunk.text || '';
    // A follow that reads again past the cap is told "still truncated" with no text: the
    // note is already shown once, an empty one would only be a second, blank note.
    if (!text) return;
    const note = NOTE_KINDS.has(chunk.kind);
    if (chunk.kind === 'OUTPUT_CHUNK_KIND_TRUNCATED') capped.hidden = false;
    const last = segments[segments.length - 1];
    if (last && !last.note && !note) last.text += text;
    else segments.push({ text, note });
    chars += text.length;
    const before = chars;
    trim();
    status.hidden = true;
    download.disabled = false;
    if (query || before !== chars) render();
    else if (note) pre.append(h('span', { class: 'output-note' }, text));
    else if (pre.lastChild && pre.lastChild.nodeType === Node.TEXT_NODE) pre.lastChild.appendData(text);
    else pre.append(text);
    // Follow the end only when the reader is already there: scrolling up to read stays put.
    if (following) pre.scrollTop = pre.scrollHeight;
  };

  let searchTimer = null;
  search.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      query = search.value;
      current = 0;
      render();
    }, 150);
  });
  search.addEventListener('keydown', (event) => {
    if (event.key !== 'Enter') return;
    event.preventDefault();
    select(current + (event.shiftKey ? -1 : 1));
  });
  prev.addEventListener('click', () => select(current - 1));
  next.addEventListener('click', () => select(current + 1));

  download.addEventListener('click', async () => {
    download.disabled = true;
    try {
      const text = await wholeOutput(ctx, runId, attempt.id);
      const url = URL.createObjectURL(new Blob([text], { type: 'text/plain;charset=utf-8' }));
      const link = h('a', { href: url, download: `run-${shortId(runId)}-attempt-${attempt.no}.log` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (error) {
      ctx.showError(error);
    } finally {
      download.disabled = false;
    }
  });

  const stream = openStream(paths.outputStream(ctx.project, runId), {
    kinds: ['attempt', 'output', 'end'],
    onEvent: (data, id, kind) => {
      if (kind === 'attempt') {
        // A new attempt's output starts from its beginning.
        segments = [];
        chars = 0;
        attempt = { id: data.attempt_id, no: data.attempt_no };
        capped.hidden = true;
        render();
        label.textContent = `attempt ${data.attempt_no}`;
        status.textContent = 'No output yet.';
        status.hidden = false;
      } else if (kind === 'output') {
        append(data);
      } else if (kind === 'end') {
        stream.close(); // the run ended and everything was read: nothing more will come
        ended = true;
        showFollow();
        element.dataset.ended = 'true';
        if (!segments.length) status.textContent = 'No output.';
      }
    },
  });
  showFollow();
  return { element, dispose: () => stream.close() };
}
