// `gpubox mcp` driven by the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk 1.32, its Client and StdioClientTransport; Node 20,
// NODE_PATH=tests/assets/node_modules): the 2025-11-25 initialize handshake,
// every core tool, a sandbox created, used and terminated through the tools,
// progress notifications, cancellation through an AbortSignal (the SDK sends
// notifications/cancelled; the cell is interrupted and the kernel answers
// after), and protocol errors as McpError. Needs root, GPUBOX_CLI, GPUBOX_AGENT.
'use strict';
const assert = require('node:assert/strict');
const { test, before, after } = require('node:test');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { McpError } = require('@modelcontextprotocol/sdk/types.js');

const CLI = process.env.GPUBOX_CLI;
const state = fs.mkdtempSync(path.join('/tmp', 'gpubox-mcp-ts-'));
const notebooks = path.join(state, 'notebooks');
const env = { XDG_STATE_HOME: state, GPUBOX_AGENT: process.env.GPUBOX_AGENT, PATH: process.env.PATH };
let client;
let sandbox;

async function call(name, args, options) {
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  // The first text block summarizes the result a line per field; the JSON is in structuredContent only.
  const text = result.content[0].text;
  assert.ok(!text.trimStart().startsWith('{'), 'the first text block is a summary, not the JSON again: ' + text);
  for (const [key, value] of Object.entries(result.structuredContent)) {
    assert.ok(text.includes(key + ':'), 'the summary names ' + key + ': ' + text);
    if (typeof value === 'string' && value.length > 0 && value.length < 200) {
      assert.ok(text.includes(value), 'the summary shows ' + key + ' as text: ' + text);
    }
  }
  return result;
}

before(async () => {
  client = new Client({ name: 'gpubox-ts-test', version: '1.0.0' });
  await client.connect(new StdioClientTransport({ command: CLI, args: ['mcp', '--notebook-dir', notebooks], env,
    stderr: 'inherit' }));
});

after(async () => {
  await client.close();
  spawnSync(CLI, ['terminate', '--all'], { env });
  fs.rmSync(state, { recursive: true, force: true });
});

test('initialize: server info, capabilities, every tool listed', async () => {
  assert.equal(client.getServerVersion().name, 'gpubox');
  assert.ok(client.getServerCapabilities().tools);
  assert.match(client.getInstructions(), /execute_code/);
  const { tools } = await client.listTools();
  const names = tools.map((tool) => tool.name).sort();
  assert.deepEqual(names, ['add_markdown', 'call_served', 'collect_job', 'create_sandbox', 'exec', 'execute_code',
    'generate', 'gpu_status', 'list_files', 'list_models', 'list_sandboxes', 'list_served', 'model_hooks', 'processes',
    'read_file', 'run_model', 'sae_top_features', 'show_budget', 'snapshot', 'submit_job', 'terminate_sandbox',
    'tokenize', 'wait_job', 'write_file']);
});

test('create_sandbox and list_sandboxes', async () => {
  const created = await call('create_sandbox', { name: 'ts-box', cpu: 1, memory: 512, env: { FOO: 'bar' } });
  assert.ok(!created.isError, JSON.stringify(created.structuredContent));
  sandbox = created.structuredContent.sandbox_id;
  assert.match(sandbox, /^[0-9a-f]{12}$/);
  const listed = await call('list_sandboxes', {});
  const box = listed.structuredContent.sandboxes.find((one) => one.sandbox_id === sandbox);
  assert.equal(box.name, 'ts-box');
  assert.equal(box.state, 'running');
  const taken = await call('create_sandbox', { name: 'ts-box' });
  assert.ok(taken.isError);
  assert.match(taken.structuredContent.error, /ts-box/);
});

test('execute_code: state, env, errors, images, progress', async () => {
  const env_value = await call('execute_code', { sandbox_id: 'ts-box', code: "import os\ny = 2\nos.environ['FOO']" });
  assert.deepEqual(env_value.structuredContent.results, ["'bar'"]);
  const state_kept = await call('execute_code', { sandbox_id: sandbox, code: 'y * 21' });
  assert.deepEqual(state_kept.structuredContent.results, ['42']);
  const error = await call('execute_code', { sandbox_id: sandbox, code: "raise ValueError('nope')" });
  assert.equal(error.isError, true);
  assert.equal(error.structuredContent.error.ename, 'ValueError');
  assert.equal(error.structuredContent.error.evalue, 'nope');
  const progress = [];
  const printed = await call('execute_code', { sandbox_id: sandbox, code: "for i in range(3): print(i, flush=True)" },
    { onprogress: (p) => progress.push(p) });
  assert.equal(printed.structuredContent.stdout, '0\n1\n2\n');
  assert.ok(progress.length >= 1, 'progress notifications while the cell printed');
  const image = await call('execute_code', { sandbox_id: sandbox, code:
    "import base64\nfrom IPython.display import Image, display\ndisplay(Image(data=base64.b64decode(" +
    "'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')))" });
  const images = image.content.filter((block) => block.type === 'image');
  assert.equal(images.length, 1);
  assert.equal(images[0].mimeType, 'image/png');
  await call('add_markdown', { sandbox_id: sandbox, text: 'from **TypeScript**' });
  const notebook = image.structuredContent.notebook;
  const checked = spawnSync('/usr/bin/python3', ['-c',
    'import sys, nbformat; nb = nbformat.read(sys.argv[1], as_version=4); nbformat.validate(nb); print(len(nb.cells))',
    notebook], { encoding: 'utf8' });
  assert.equal(checked.status, 0, checked.stderr);
  assert.equal(checked.stdout.trim(), '6');
});

test('cancellation interrupts the cell; the kernel answers after', async () => {
  const controller = new AbortController();
  const spinning = call('execute_code', { sandbox_id: sandbox, code: 'while True:\n    pass' },
    { signal: controller.signal, timeout: 120000 });
  setTimeout(() => controller.abort('enough'), 1500);
  await assert.rejects(spinning);
  const started = Date.now();
  const after_cancel = await call('execute_code', { sandbox_id: sandbox, code: '1+1' });
  assert.deepEqual(after_cancel.structuredContent.results, ['2']);
  assert.ok(Date.now() - started < 20000, 'the interrupted kernel answers promptly');
});

test('exec, files, processes, gpu_status', async () => {
  const ran = await call('exec', { sandbox_id: sandbox, command: 'echo $FOO; exit 7' });
  assert.equal(ran.structuredContent.exit_code, 7);
  assert.equal(ran.structuredContent.stdout, 'bar\n');
  await call('write_file', { sandbox_id: sandbox, path: 'ts/x.txt', content: 'written from ts' });
  const read = await call('read_file', { sandbox_id: sandbox, path: '/workspace/ts/x.txt' });
  assert.equal(read.structuredContent.content, 'written from ts');
  const listed = await call('list_files', { sandbox_id: sandbox, path: 'ts' });
  assert.deepEqual(listed.structuredContent.entries.map((e) => path.basename(e.path)), ['x.txt']);
  const procs = await call('processes', { sandbox_id: sandbox });
  assert.ok(procs.structuredContent.processes.some((p) => p.pid === 1));
  const gpu = await call('gpu_status', { sandbox_id: sandbox });
  assert.equal(gpu.structuredContent.source, 'none');
});

test('jobs: submit, wait, collect', async () => {
  const job = await call('submit_job', { sandbox_id: sandbox, command: 'echo ts > $GPUBOX_OUT/t.txt' });
  const job_id = job.structuredContent.job_id;
  const waited = await call('wait_job', { sandbox_id: sandbox, job_id, timeout: 60 });
  assert.equal(waited.structuredContent.status, 'succeeded');
  const collected = await call('collect_job', { sandbox_id: sandbox, job_id });
  assert.equal(fs.readFileSync(path.join(collected.structuredContent.out_dir, 'out', 't.txt'), 'utf8'), 'ts\n');
});

test('protocol errors are McpErrors: unknown tool, bad arguments', async () => {
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }),
    (e) => e instanceof McpError && e.code === -32602 && /no_such_tool/.test(e.message));
  await assert.rejects(client.callTool({ name: 'execute_code', arguments: { sandbox_id: sandbox, code: 5 } }),
    (e) => e instanceof McpError && e.code === -32602 && /arguments\.code/.test(e.message));
});

test('terminate_sandbox', async () => {
  const ended = await call('terminate_sandbox', { sandbox_id: 'ts-box' });
  assert.equal(ended.structuredContent.terminated, true);
  const listed = await call('list_sandboxes', {});
  assert.ok(!listed.structuredContent.sandboxes.some((one) => one.sandbox_id === sandbox));
  const gone = await call('exec', { sandbox_id: sandbox, command: 'true' });
  assert.equal(gone.isError, true);
});
