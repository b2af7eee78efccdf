// Drives the page's worker.js under node, as the page does (no browser): loads it into a context
// with the Worker globals it uses (postMessage, onmessage, fetch of the folder's files), sends
// 'load' with trainer.json's env_page, collects some idle animation frames, then 'start' and waits
// for 'done'. Beside it, a second instance of the same wasm is stepped by hand from the idle
// frames' start (trainer_init(0), trainer_eval_reset, frame_steps eval steps a frame) for the test
// to compare. Prints one JSON object. Usage: node web_worker_node.js FOLDER STEPS SEED
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const [folder, steps, seed] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const meta = JSON.parse(fs.readFileSync(path.join(folder, 'trainer.json')));
const messages = [];
let onDone = null;
const context = {
  console, performance, MessageChannel, WebAssembly, BigInt, Math, Number, Array, Float32Array, Promise, Error, String,
  setInterval, clearInterval, setTimeout,
  fetch: async (name) => {
    const bytes = fs.readFileSync(path.join(folder, name));
    return { ok: true, arrayBuffer: async () => bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length) };
  },
  postMessage: (m) => { messages.push(m); if (m.type === 'done' || m.type === 'error') onDone && onDone(); },
};
vm.createContext(context);
vm.runInContext(fs.readFileSync(path.join(folder, 'worker.js'), 'utf8'), context);
const send = (m) => context.onmessage({ data: m });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const page = meta.env_page;
  await send({ type: 'load', obsDim: page.obs_dim, frameSteps: page.frame_steps });
  await sleep(600);  // the idle animation: a frame per 50 ms
  const idle = messages.filter((m) => m.type === 'frames').flatMap((m) => m.frames);
  const finished = new Promise((resolve) => { onDone = resolve; });
  send({ type: 'start', steps, seed, evalEpisodes: meta.eval_episodes, numEnvs: meta.num_envs });
  await finished;
  // by hand: the idle frames' start, then frame_steps eval steps per frame
  const bytes = fs.readFileSync(path.join(folder, 'trainer-scalar.wasm'));
  const { instance } = await WebAssembly.instantiate(bytes, {});
  const t = instance.exports;
  t.trainer_init(0n);
  t.trainer_eval_reset(t.web_obs());
  const read = () => Array.from(new Float32Array(t.memory.buffer, t.web_obs(), page.obs_dim));
  const ready = messages.find((m) => m.type === 'ready');
  const first = read();
  const byHand = [];
  for (let i = 0; i < idle.length; i++) {
    let ended = false;
    for (let k = 0; k < page.frame_steps && !ended; k++) ended = t.trainer_eval_step(t.web_obs());
    byHand.push(read());
    if (ended) t.trainer_eval_reset(t.web_obs());
  }
  const done = messages.find((m) => m.type === 'done' || m.type === 'error');
  console.log(JSON.stringify({ ready_obs: ready.obs, first, idle, byHand, done }));
  process.exit(0);
}
main().catch((error) => { console.error(error); process.exit(1); });
