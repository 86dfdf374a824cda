#!/usr/bin/env node
// node-postgres authentication: SCRAM-SHA-256 over TLS with the test CA (the
// certificate and the 127.0.0.1 name verified), SCRAM over plain TCP, and a wrong
// password refused with 28P01.
// Usage: SUNDIAL_HOST=.. SUNDIAL_PORT=.. SUNDIAL_PASSWORD=.. SUNDIAL_CA=ca.pem node node_auth_test.js
'use strict';
const fs = require('fs');
const { Client } = require('pg');

const NAME = 'auth (node-postgres)';
const base = {
  host: process.env.SUNDIAL_HOST || '127.0.0.1',
  port: Number(process.env.SUNDIAL_PORT || 5432),
  database: 'sundial',
  user: 'sundial',
  connectionTimeoutMillis: 10000,
};
const password = process.env.SUNDIAL_PASSWORD;
const tls = { ca: fs.readFileSync(process.env.SUNDIAL_CA), rejectUnauthorized: true };

const failures = [];
let passed = 0;
function check(what, cond, detail) {
  if (cond) { passed++; return; }
  failures.push(detail ? `${what}: ${detail}` : what);
  console.error(`  CHECK FAILED: ${what} ${detail || ''}`);
}

async function login(opts) {
  const client = new Client({ ...base, ...opts });
  await client.connect();
  try {
    const r = await client.query('SELECT current_user AS u');
    return r.rows[0].u;
  } finally {
    await client.end();
  }
}

(async () => {
  try {
    check('SCRAM over TLS', (await login({ password, ssl: tls })) === 'sundial');
    check('SCRAM without TLS', (await login({ password, ssl: false })) === 'sundial');
  } catch (e) {
    failures.push(`login raised: ${e.message} (${e.code})`);
  }
  try {
    await login({ password: 'wrong', ssl: tls });
    check('wrong password refused', false, 'connected');
  } catch (e) {
    check('wrong password refused with 28P01', e.code === '28P01', `${e.code} ${e.message}`);
  }
  if (failures.length) {
    console.error(`\nFAIL [${NAME}] ${failures.length} failure(s):`);
    for (const f of failures) console.error(`  - ${f}`);
    process.exit(1);
  }
  console.log(`PASS [${NAME}]`);
  console.log(`${NAME}: ${passed} passed, 0 failed`);
})();
