// app.js: the page around worker.js: fields, Start/Stop, learning curve, animation, result.
// URL: ?algo=td3&env=pendulum&steps=N&seed=S&autostart=1 (algo/env must match this folder's build)
'use strict';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const NAMES = {
  td3: 'TD3', sac: 'SAC', ppo: 'PPO', dqn: 'DQN', pendulum: 'Pendulum', acrobot: 'Acrobot', cartpole: 'CartPole',
  multirotor: 'a quadrotor (Crazyflie 2.1)',
};

let meta = null;  // trainer.json: this folder's algo, env and config
let worker = null;
let points = [];  // [step, mean return of the last 5 training episodes]
let totalSteps = 0;
let queue = [];  // observations to animate, 20 a second
let current = null;

// ---------------------------------------------------------------- validation (ConfigError's rules)

// what Python's repr shows for the value the field would hold
function pyRepr(text) {
  const t = text.trim();
  if (/^[+-]?\d+$/.test(t)) return BigInt(t).toString();
  if (t !== '' && Number.isFinite(Number(t))) {
    const v = Number(t);
    return Number.isInteger(v) ? v.toFixed(1) : String(v);
  }
  return "'" + text.replace(/\\/g, '\\\\').replace(/'/g, "\\'") + "'";
}

// [value, null] or [null, message]: total_steps must be a positive int (and >= num_envs)
function checkSteps(text) {
  const t = text.trim();
  if (!/^[+-]?\d+$/.test(t) || BigInt(t) < 1n) {
    return [null, `${meta.config_name}.total_steps must be a positive int, got ${pyRepr(text)}`];
  }
  if (BigInt(t) < BigInt(meta.num_envs)) {
    return [null, `${meta.config_name}.total_steps (${BigInt(t)}) must be >= num_envs (${meta.num_envs})`];
  }
  if (BigInt(t) > BigInt(Number.MAX_SAFE_INTEGER)) {
    return [null, `${meta.config_name}.total_steps must be at most ${Number.MAX_SAFE_INTEGER} here, got ${BigInt(t)}`];
  }
  return [Number(t), null];
}

// the driver's check_seed: an int in [0, 2**31)
function checkSeed(text) {
  const t = text.trim();
  if (!/^[+-]?\d+$/.test(t) || BigInt(t) < 0n || BigInt(t) >= 2n ** 31n) {
    return [null, `seed must be an int in [0, 2**31), got ${pyRepr(text)}`];
  }
  return [Number(t), null];
}

function validate() {
  const [steps, stepsError] = checkSteps($('steps').value);
  const [seed, seedError] = checkSeed($('seed').value);
  $('steps').setAttribute('aria-invalid', stepsError ? 'true' : 'false');
  $('seed').setAttribute('aria-invalid', seedError ? 'true' : 'false');
  $('error').textContent = stepsError || seedError || '';
  return stepsError || seedError ? null : { steps, seed };
}

// ---------------------------------------------------------------- learning curve

function niceStep(range, target) {
  const raw = range / target;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * magnitude >= raw) return m * magnitude;
  return 10 * magnitude;
}

function drawCurve() {
  const canvas = $('curve');
  const g = canvas.getContext('2d');
  const W = canvas.width, H = canvas.height;
  const left = 64, right = 16, top = 28, bottom = 44;
  g.clearRect(0, 0, W, H);
  g.fillStyle = '#fff';
  g.fillRect(0, 0, W, H);
  const xMax = Math.max(totalSteps, 1);
  let yMin = { acrobot: -500, cartpole: 0, multirotor: 0 }[meta.env] ?? -1600, yMax = 0;
  for (const [, r] of points) { yMin = Math.min(yMin, r); yMax = Math.max(yMax, r); }
  yMin -= 0.02 * (yMax - yMin);  // a curve on the floor stays visible above the x axis
  const yStep = niceStep(yMax - yMin || 1, 5);
  yMin = Math.floor(yMin / yStep) * yStep;
  yMax = Math.ceil(yMax / yStep) * yStep;
  const X = (s) => left + ((W - left - right) * s) / xMax;
  const Y = (r) => top + ((H - top - bottom) * (yMax - r)) / (yMax - yMin || 1);
  g.font = '12px system-ui, sans-serif';
  g.strokeStyle = '#e4e4e4';
  g.fillStyle = '#444';
  g.lineWidth = 1;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let r = yMin; r <= yMax + 1e-9; r += yStep) {
    g.beginPath(); g.moveTo(left, Y(r)); g.lineTo(W - right, Y(r)); g.stroke();
    g.fillText(String(Math.round(r)), left - 6, Y(r));
  }
  const xStep = niceStep(xMax, 6);
  g.textAlign = 'center';
  g.textBaseline = 'top';
  for (let s = 0; s <= xMax + 1e-9; s += xStep) {
    g.beginPath(); g.moveTo(X(s), top); g.lineTo(X(s), H - bottom); g.stroke();
    g.fillText(s >= 1000 ? `${s / 1000}k` : String(s), X(s), H - bottom + 6);
  }
  g.strokeStyle = '#333';
  g.beginPath(); g.moveTo(left, top); g.lineTo(left, H - bottom); g.lineTo(W - right, H - bottom); g.stroke();
  g.fillText('environment step', (left + W - right) / 2, H - 18);
  g.save();
  g.translate(16, (top + H - bottom) / 2);
  g.rotate(-Math.PI / 2);
  g.textBaseline = 'middle';
  g.fillText('episode return', 0, 0);
  g.restore();
  g.textAlign = 'left';
  g.textBaseline = 'top';
  g.fillText('training episode return (mean of the last 5 episodes)', left, 8);
  if (points.length) {
    g.strokeStyle = '#1f6fd1';
    g.lineWidth = 2;
    g.beginPath();
    points.forEach(([s, r], i) => (i ? g.lineTo(X(s), Y(r)) : g.moveTo(X(s), Y(r))));
    g.stroke();
  }
}

// ---------------------------------------------------------------- animation

function drawEnv(obs) {
  const canvas = $('env');
  const g = canvas.getContext('2d');
  const W = canvas.width, H = canvas.height, cx = W / 2;
  g.fillStyle = '#fff';
  g.fillRect(0, 0, W, H);
  g.lineCap = 'round';
  if (meta.env === 'multirotor') {
    drawMultirotor(g, obs, meta.env_page.vehicle, H);  // multirotor.js: top and side views
  } else if (meta.env === 'cartpole') {
    // obs: x, x', θ, θ'; the track is ±2.4 (where the episode ends), the pole 1 long (gymnasium's 2 · 0.5)
    const scale = W / 6, cy = H * 0.7, pole = scale;
    g.strokeStyle = '#aaa'; g.lineWidth = 2;
    g.beginPath(); g.moveTo(cx - 2.4 * scale, cy); g.lineTo(cx + 2.4 * scale, cy); g.stroke();
    if (obs) {
      const x = cx + obs[0] * scale, t = obs[2];
      g.fillStyle = '#333'; g.fillRect(x - 24, cy - 14, 48, 28);
      g.strokeStyle = '#d1501f'; g.lineWidth = 8;
      g.beginPath(); g.moveTo(x, cy - 14); g.lineTo(x + pole * Math.sin(t), cy - 14 - pole * Math.cos(t)); g.stroke();
    }
  } else if (meta.env === 'acrobot') {
    // obs: cos θ1, sin θ1, cos θ2, sin θ2, θ1', θ2'; θ1 = 0 hangs down; goal: the tip a link above the pivot
    const L = W * 0.22, cy = H / 2;
    g.strokeStyle = '#aaa'; g.setLineDash([6, 5]); g.lineWidth = 1;
    g.beginPath(); g.moveTo(0, cy - L); g.lineTo(W, cy - L); g.stroke(); g.setLineDash([]);
    if (obs) {
      const t1 = Math.atan2(obs[1], obs[0]), t2 = Math.atan2(obs[3], obs[2]);
      const x1 = cx + L * Math.sin(t1), y1 = cy + L * Math.cos(t1);
      const x2 = x1 + L * Math.sin(t1 + t2), y2 = y1 + L * Math.cos(t1 + t2);
      g.strokeStyle = '#1f6fd1'; g.lineWidth = 10;
      g.beginPath(); g.moveTo(cx, cy); g.lineTo(x1, y1); g.lineTo(x2, y2); g.stroke();
      g.fillStyle = '#333'; g.beginPath(); g.arc(x1, y1, 5, 0, 2 * Math.PI); g.fill();
    }
    g.fillStyle = '#333'; g.beginPath(); g.arc(cx, cy, 6, 0, 2 * Math.PI); g.fill();
  } else {
    // obs: cos θ, sin θ, θ'; θ = 0 points up
    const L = W * 0.36, cy = H / 2;
    g.strokeStyle = '#ddd'; g.lineWidth = 1;
    g.beginPath(); g.arc(cx, cy, L, 0, 2 * Math.PI); g.stroke();
    if (obs) {
      const t = Math.atan2(obs[1], obs[0]);
      g.strokeStyle = '#d1501f'; g.lineWidth = 14;
      g.beginPath(); g.moveTo(cx, cy); g.lineTo(cx - L * Math.sin(t), cy - L * Math.cos(t)); g.stroke();
    }
    g.fillStyle = '#333'; g.beginPath(); g.arc(cx, cy, 6, 0, 2 * Math.PI); g.fill();
  }
  g.fillStyle = '#666';
  g.font = '12px system-ui, sans-serif';
  g.textAlign = 'left';
  g.textBaseline = 'top';
  g.fillText('current deterministic policy', 8, 8);
}

let lastTick = 0;
function tick(now) {
  if (now - lastTick >= 50) {
    lastTick = now;
    if (queue.length > 12) queue = queue.slice(-4);  // behind: catch up rather than lag
    if (queue.length) current = queue.shift();
    drawEnv(current);
  }
  requestAnimationFrame(tick);
}

// ---------------------------------------------------------------- runs

function fmt(v, digits) {
  return Number(v).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function start() {
  if (worker === null) return false;  // not loaded, or a page for another algorithm or env
  const values = validate();
  if (!values) return false;
  totalSteps = values.steps;
  points = [];
  drawCurve();
  window.trainerResult = undefined;
  $('eval').textContent = '–';
  $('checksum').textContent = '–';
  $('status').textContent = 'training…';
  $('start').disabled = true;
  $('stop').disabled = false;
  worker.postMessage({
    type: 'start', steps: values.steps, seed: values.seed, evalEpisodes: meta.eval_episodes, numEnvs: meta.num_envs,
  });
  return true;
}

function onMessage(event) {
  const m = event.data;
  if (m.type === 'ready') {
    $('build').textContent = m.build;
    $('status').textContent = 'ready';
    $('start').disabled = false;
    current = m.obs;
    if (params.get('autostart') === '1') start();
  } else if (m.type === 'frames') {
    queue.push(...m.frames);
  } else if (m.type === 'progress') {
    queue.push(...m.frames);
    $('done').textContent = fmt(m.steps, 0);
    $('rate').textContent = fmt(m.steps / Math.max(m.seconds, 1e-9), 0);
    if (m.recent !== 0) {
      points.push([m.steps, m.recent]);
      drawCurve();
    }
  } else if (m.type === 'done') {
    $('status').textContent = m.stopped ? `stopped at step ${fmt(m.steps, 0)}` : `done in ${fmt(m.seconds, 2)} s`;
    $('done').textContent = fmt(m.steps, 0);
    $('rate').textContent = fmt(m.steps / Math.max(m.seconds, 1e-9), 0);
    $('eval').textContent = `${fmt(m.eval_return, 3)} (${meta.eval_episodes} episodes)`;
    $('checksum').textContent = m.checksum;
    $('start').disabled = false;
    $('stop').disabled = true;
    window.trainerResult = {
      steps: m.steps,
      eval_return: m.eval_return,
      checksum: m.checksum,
      seconds: m.seconds,
      stopped: m.stopped,
    };
  } else if (m.type === 'error') {
    $('status').textContent = 'failed';
    $('error').textContent = m.message;
    console.error(m.message);
  }
}

async function main() {
  const response = await fetch('trainer.json');
  meta = await response.json();
  const title = `${NAMES[meta.algo] || meta.algo} on ${NAMES[meta.env] || meta.env}`;
  $('title').textContent = title;
  document.title = `dispatchrl: ${title} in the browser`;
  const wanted = { algo: params.get('algo') ?? meta.algo, env: params.get('env') ?? meta.env };
  if (wanted.algo !== meta.algo || wanted.env !== meta.env) {
    // this folder's trainer cannot train another algorithm or env: no Start, and say what serves it
    $('start').disabled = true;
    $('stop').disabled = true;
    $('status').textContent = 'not served here';
    $('error').textContent = `this page trains ${meta.algo} on ${meta.env}, not ${wanted.algo} on ${wanted.env}: ` +
      `run dispatchrl web --algo ${wanted.algo} --env ${wanted.env} and open the address it prints`;
    return;
  }
  $('steps').value = params.get('steps') ?? String(meta.steps);
  $('seed').value = params.get('seed') ?? String(meta.seed);
  const c = meta.config;
  const memory = meta.capacity === null  // PPO: a rollout per iteration, no replay
    ? `rollout ${c.num_envs} envs × ${c.steps_per_env} steps, ${c.epochs} epochs`
    : `replay capacity ${meta.capacity}, warm-up ${c.warmup_steps} steps`;
  $('config').textContent = `config: ${memory}, batch ${c.batch_size}, hidden ${c.hidden.join('×')}, ` +
    `γ ${c.gamma}; eval: ${meta.eval_episodes} deterministic episodes. ` +
    `Same bits as the native trainer with the same seed: dispatchrl export-trainer ${meta.algo} --env ${meta.env} --steps ${meta.steps} --seed SEED --target host --run`;
  totalSteps = Number(checkSteps($('steps').value)[0] || meta.steps);
  if (meta.env === 'multirotor') $('env').width = 2 * $('env').height;  // two square panels
  drawCurve();
  requestAnimationFrame(tick);
  $('steps').addEventListener('input', validate);
  $('seed').addEventListener('input', validate);
  $('controls').addEventListener('submit', (event) => { event.preventDefault(); start(); });
  $('stop').addEventListener('click', () => worker.postMessage({ type: 'stop' }));
  $('start').disabled = true;
  validate();
  worker = new Worker('worker.js');
  worker.onmessage = onMessage;
  worker.onerror = (event) => { $('error').textContent = event.message; console.error(event.message); };
  const envPage = meta.env_page || {};  // trainer.json: the observation's size, env steps per frame
  worker.postMessage({ type: 'load', obsDim: envPage.obs_dim, frameSteps: envPage.frame_steps });
}

main().catch((error) => { $('error').textContent = String(error); console.error(error); });
