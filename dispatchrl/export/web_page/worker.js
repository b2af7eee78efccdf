// worker.js: runs the exported trainer (trainer.wasm) off the page's thread.
// Messages in:  {type: 'load', obsDim, frameSteps}, {type: 'start', steps, seed, evalEpisodes, numEnvs},
//               {type: 'stop'}  (obsDim: the floats a frame carries; frameSteps: env steps per frame)
// Messages out: {type: 'ready', build}, {type: 'progress', steps, recent, seconds, frames},
//               {type: 'frames', frames}, {type: 'done', steps, eval_return, checksum, seconds, stopped},
//               {type: 'error', message}
'use strict';

const FRAME_MS = 50;  // the animation's 20 frames a second (Pendulum's own dt)
const CHUNK_MS = 100;  // trainer_run's share between two looks at the message queue
// wasm-feature-detect's SIMD128 probe: (func (result v128) i32.const 0 i8x16.splat i8x16.popcnt)
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0,
  65, 0, 253, 15, 253, 98, 11]);

let trainer = null;  // the wasm's exports
let obsView = null;  // its observation buffer
let running = false;
let stopRequested = false;
let lastFrame = 0;
let idleTimer = null;
let obsDim = 8;  // the floats of the observation a frame carries
let frameSteps = 1;  // env steps per frame: an env with a shorter dt than FRAME_MS plays in real time

async function load() {
  const simd = WebAssembly.validate(SIMD_PROBE);
  const file = simd ? 'trainer.wasm' : 'trainer-scalar.wasm';
  const response = await fetch(file);
  if (!response.ok) throw new Error(`${file}: HTTP ${response.status}`);
  const { instance } = await WebAssembly.instantiate(await response.arrayBuffer(), {});
  trainer = instance.exports;
  return simd ? 'wasm SIMD128' : 'wasm (scalar)';
}

// let queued messages (Stop) in between chunks, without setTimeout's 4 ms clamp
function yieldToMessages() {
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = resolve;
    channel.port2.postMessage(0);
  });
}

function observation() {
  // the wasm memory may not grow (static trainer), but re-view it if it ever does
  if (obsView === null || obsView.buffer !== trainer.memory.buffer) {
    obsView = new Float32Array(trainer.memory.buffer, trainer.web_obs(), obsDim);
  }
  return Array.from(obsView);
}

// step the evaluation env with the current deterministic policy: one frame per FRAME_MS elapsed
function frames(limit) {
  const now = performance.now();
  const owed = Math.min(limit, Math.floor((now - lastFrame) / FRAME_MS));
  if (owed <= 0) return [];
  lastFrame = now;
  const out = [];
  for (let i = 0; i < owed; i++) {
    let ended = false;
    for (let k = 0; k < frameSteps && !ended; k++) ended = trainer.trainer_eval_step(trainer.web_obs());
    out.push(observation());
    if (ended) {
      trainer.trainer_eval_reset(trainer.web_obs());
    }
  }
  return out;
}

function idle() {
  if (idleTimer === null) {
    lastFrame = performance.now() - FRAME_MS;
    idleTimer = setInterval(() => postMessage({ type: 'frames', frames: frames(1) }), FRAME_MS);
  }
}

async function run(steps, seed, evalEpisodes, numEnvs) {
  clearInterval(idleTimer);
  idleTimer = null;
  running = true;
  stopRequested = false;
  trainer.trainer_init(BigInt(seed));
  trainer.trainer_eval_reset(trainer.web_obs());
  let done = 0;
  let chunk = 20;
  const start = performance.now();
  lastFrame = start;
  while (done < steps && !stopRequested) {
    // whole vectorised steps: trainer_run(n) runs floor(n / numEnvs) of them
    const n = Math.min(Math.max(numEnvs, chunk - (chunk % numEnvs)), steps - done);
    const before = performance.now();
    trainer.trainer_run(BigInt(n));
    const took = performance.now() - before;
    done += n;
    // toward CHUNK_MS, at most doubling: the warm-up steps (no updates) are fast, and a long first
    // call would run in V8's baseline tier throughout (it tiers a wasm function up between calls)
    chunk = Math.max(10, Math.min(2 * n, Math.round((n * CHUNK_MS) / Math.max(took, 0.1))));
    postMessage({
      type: 'progress',
      steps: done,
      recent: trainer.trainer_recent_return(5),
      seconds: (performance.now() - before + (before - start)) / 1000,
      frames: frames(8),
    });
    await yieldToMessages();
  }
  const seconds = (performance.now() - start) / 1000;
  const evalReturn = trainer.trainer_evaluate(evalEpisodes);
  const checksum = BigInt.asUintN(64, trainer.trainer_checksum()).toString(16).padStart(16, '0');
  trainer.trainer_eval_reset(trainer.web_obs());
  running = false;
  postMessage({
    type: 'done',
    steps: Number(trainer.trainer_steps()),
    eval_return: evalReturn,
    checksum,
    seconds,
    stopped: done < steps,
  });
  idle();
}

onmessage = async (event) => {
  const message = event.data;
  try {
    if (message.type === 'load') {
      obsDim = message.obsDim || obsDim;
      frameSteps = message.frameSteps || frameSteps;
      const build = await load();
      trainer.trainer_init(0n);
      trainer.trainer_eval_reset(trainer.web_obs());
      postMessage({ type: 'ready', build, obs: observation() });
      idle();
    } else if (message.type === 'start' && !running) {
      await run(message.steps, message.seed, message.evalEpisodes, message.numEnvs || 1);
    } else if (message.type === 'stop') {
      stopRequested = true;
    }
  } catch (error) {
    running = false;
    postMessage({ type: 'error', message: String(error && error.stack ? error.stack : error) });
  }
};
