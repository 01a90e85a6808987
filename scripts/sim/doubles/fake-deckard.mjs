#!/usr/bin/env node
// Test double for Deckard, the inference service on spark-1. Usage: fake-deckard.mjs STATE_DIR.
// Reads STATE_DIR/deckard.json {port, gpuDir, readyDelayMs}. While it runs, its process is on the
// fake GPU (gpuDir/live-<pid>, listed by the fake nvidia-smi). GET /v1/health/ready is the
// model-ready check: 503 while the model loads, while draining, or while STATE_DIR/break-ready
// exists (its text is the error); 200 otherwise. POST /drain starts draining, POST /resume ends it.
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';

const dir = process.argv[2];
const cfg = JSON.parse(readFileSync(join(dir, 'deckard.json'), 'utf8'));
const startedAt = Date.now();
let draining = false;
const live = join(cfg.gpuDir, `live-${process.pid}`);
writeFileSync(live, `${process.pid}, /opt/deckard/bin/deckard-server, 98304\n`);

const server = createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/drain') {
    draining = true;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"draining":true}');
    return;
  }
  if (req.method === 'POST' && req.url === '/resume') {
    draining = false;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"draining":false}');
    return;
  }
  if (req.method === 'GET' && req.url === '/v1/health/ready') {
    const broken = join(dir, 'break-ready');
    if (existsSync(broken)) {
      res.writeHead(503).end(readFileSync(broken, 'utf8') || 'model failed to load');
    } else if (draining) {
      res.writeHead(503).end('draining');
    } else if (Date.now() - startedAt < (cfg.readyDelayMs ?? 0)) {
      res.writeHead(503).end('loading model');
    } else {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ready"}');
    }
    return;
  }
  res.writeHead(404).end();
});
const shutdown = () => {
  rmSync(live, { force: true });
  server.close();
  process.exit(0);
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
server.listen(cfg.port, '127.0.0.1', () => writeFileSync(join(dir, 'pid'), String(process.pid)));
