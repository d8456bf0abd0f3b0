// What the live view and the console share: GET /metrics read into series. Served once,
// at /shop/metrics.js, before each page's own script.
"use strict";

// Prometheus text format: `name{label="value",...} value [timestamp]`, one per line;
// lines starting with # are comments and metadata.
function parseMetrics(text) {
  const series = [];
  for (const line of text.split("\n")) {
    const match = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!match) continue; // blank, or a # line
    const labels = {};
    for (const [, name, value] of (match[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[name] = value.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    series.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return series;
}

// Where the console leaves the admin token for the live view: this tab's session only
// (sessionStorage is per tab and gone when it closes), never the URL or localStorage.
const ADMIN_TOKEN_KEY = "seckill.admin_token";
