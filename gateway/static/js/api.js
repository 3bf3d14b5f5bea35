// The gateway's REST resources. Every path the dashboard uses is written here and nowhere
// else, so a change of the gateway's routes is a change of this one file.

import { token } from './auth.js';

const enc = encodeURIComponent;

export const paths = {
  runs: (project) => `/v1/projects/${enc(project)}/runs`,
  run: (project, runId) => `/v1/projects/${enc(project)}/runs/${enc(runId)}`,
  attempts: (project, runId) => `/v1/projects/${enc(project)}/runs/${enc(runId)}/attempts`,
  events: (project, runId) => `/v1/projects/${enc(project)}/runs/${enc(runId)}/events`,
  projectStream: (project) => `/v1/projects/${enc(project)}/events:stream`,
  runStream: (project, runId) => `/v1/projects/${enc(project)}/runs/${enc(runId)}/events:stream`,
  output: (project, runId) => `/v1/projects/${enc(project)}/runs/${enc(runId)}/output`,
  runCounts: (project) => `/v1/projects/${enc(project)}/runs:count`,
  outputStream: (project, runId) => `/v1/projects/${enc(project)}/runs/${enc(runId)}/output:stream`,
  occupancy: (owner, instance) =>
    `/v1/capacity/owners/${enc(owner)}/instances/${enc(instance)}`,
  agent: (agentId) => `/v1/agents/${enc(agentId)}`,
  agents: () => '/v1/agents',
  runtimes: () => '/v1/runtimes',
  schedules: (project) => `/v1/projects/${enc(project)}/schedules`,
  schedule: (project, id) => `/v1/projects/${enc(project)}/schedules/${enc(id)}`,
  scheduleEvents: (project, id) => `/v1/projects/${enc(project)}/schedules/${enc(id)}/events`,
  scheduleRuns: (project, id) => `/v1/projects/${enc(project)}/schedules/${enc(id)}/runs`,
  scheduleUpcoming: (project, id) => `/v1/projects/${enc(project)}/schedules/${enc(id)}/upcoming`,
  longTasks: (project) => `/v1/projects/${enc(project)}/longTasks`,
  longTask: (project, id) => `/v1/projects/${enc(project)}/longTasks/${enc(id)}`,
  longTaskStream: (project) => `/v1/projects/${enc(project)}/longTasks:stream`,
};

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.reason = problem.reason || '';
    this.problem = problem;
  }
}

// Listeners told when the gateway refuses the token (the app shows the token form).
const unauthorized = new Set();
export function onUnauthorized(listener) {
  unauthorized.add(listener);
}
export function reportUnauthorized() {
  for (const listener of unauthorized) listener();
}

export async function api(path, { method = 'GET', body, headers = {}, query } = {}) {
  let url = path;
  if (query) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== '') params.append(key, value);
    }
    const text = params.toString();
    if (text) url += `?${text}`;
  }
  const response = await fetch(url, {
    method,
    cache: 'no-store',
    headers: {
      Accept: 'application/json',
      ...(token() ? { Authorization: `Bearer ${token()}` } : {}),
      ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}),
      ...headers,
    },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  if (response.status === 401) reportUnauthorized();
  if (!response.ok) {
    let problem = {};
    try {
      problem = await response.json();
    } catch {
      problem = { title: response.statusText };
    }
    throw new ApiError(response.status, problem);
  }
  if (response.status === 204) return null;
  return response.json();
}

// Every page of a list resource, up to `limit` items.
export async function listAll(path, key, query = {}, limit = 500) {
  const items = [];
  let pageToken = '';
  do {
    const page = await api(path, { query: { ...query, page_size: 100, page_token: pageToken } });
    items.push(...(page[key] || []));
    pageToken = page.next_page_token || '';
  } while (pageToken && items.length < limit);
  return items;
}
