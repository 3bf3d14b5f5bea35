// Search within a log: where a text occurs (case-insensitive, literal), and the log's
// segments rendered with those places marked. Segments are {text, note}: output text, or a
// note from truerun (skipped / truncated) that is styled apart and never searched.

import { h } from './dom.js';

// Pure: [start, end) of each occurrence of `query` in `text`, left to right, not overlapping.
export function findAll(text, query) {
  const found = [];
  if (!query) return found;
  const hay = text.toLowerCase();
  const needle = query.toLowerCase();
  for (let at = hay.indexOf(needle); at >= 0; at = hay.indexOf(needle, at + needle.length)) {
    found.push([at, at + needle.length]);
  }
  return found;
}

// The nodes of `segments` with each match of `query` in a <mark>; returns { nodes, marks }.
export function highlighted(segments, query) {
  const nodes = [];
  const marks = [];
  for (const segment of segments) {
    if (segment.note) {
      nodes.push(h('span', { class: 'output-note' }, segment.text));
      continue;
    }
    let last = 0;
    for (const [start, end] of findAll(segment.text, query)) {
      if (start > last) nodes.push(document.createTextNode(segment.text.slice(last, start)));
      const mark = h('mark', { class: 'log-match' }, segment.text.slice(start, end));
      marks.push(mark);
      nodes.push(mark);
      last = end;
    }
    if (last < segment.text.length) nodes.push(document.createTextNode(segment.text.slice(last)));
  }
  return { nodes, marks };
}
