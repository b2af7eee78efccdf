// multirotor.js: the multirotor's animation, render.py's frame drawn on the page's canvas: a top
// view (x right, y up) and a side view (x right, z up) of the vehicle, the termination box in grey
// and the target (the origin) as a green cross, positions to scale, the vehicle `enlarge` (5) times
// larger than it is. It is drawn from the observation (the page has nothing else): position,
// rotation matrix (body to world, row-major), ..., and the rotors coloured by the last commanded
// RPM of the action history (render.py colours the rotors' actual RPM, which lags it).
'use strict';

// per panel: the world axes drawn rightwards and upwards, the depth axis and its sign towards the viewer
const MULTIROTOR_VIEWS = [
  { right: 0, up: 1, depth: 2, sign: 1 },
  { right: 0, up: 2, depth: 1, sign: -1 },
];
const MULTIROTOR_IDLE = [190, 215, 255];
const MULTIROTOR_FULL = [10, 50, 190];

// the pose in world coordinates: position, drawn rotor centres, thrust axis (body z) and each
// rotor's last command as a fraction of the RPM range (0 without an action history)
function multirotorPose(obs, vehicle) {
  const p = [obs[0], obs[1], obs[2]];
  const R = (i, j) => obs[3 + 3 * i + j];
  const rotors = vehicle.rotor_positions.map((r) =>
    [0, 1, 2].map((i) => p[i] + vehicle.enlarge * (R(i, 0) * r[0] + R(i, 1) * r[1] + R(i, 2) * r[2])));
  const normal = [R(0, 2), R(1, 2), R(2, 2)];
  const h = vehicle.action_history;
  const command = [0, 1, 2, 3].map((j) =>
    (h > 0 ? Math.min(Math.max((obs[18 + 4 * (h - 1) + j] + 1) / 2, 0), 1) : 0));
  return { position: p, rotors, normal, command };
}

// canvas x, y of a world point in a `size` square panel: render.py's scale (the box's half-width
// is 0.8 of the panel's)
function multirotorPixel(point, view, size, box) {
  const half = size / 2, scale = half / (1.25 * box);
  return [half + scale * point[view.right], half - scale * point[view.up]];
}

function drawMultirotor(g, obs, vehicle, size) {
  const box = vehicle.box, half = size / 2, scale = half / (1.25 * box);
  const pose = obs ? multirotorPose(obs, vehicle) : null;
  const body = vehicle.rotor_positions;
  let spacing = Infinity;  // the rotors' nearest distance: their discs leave the arms visible
  for (let a = 0; a < body.length; a++) {
    for (let b = a + 1; b < body.length; b++) spacing = Math.min(spacing, Math.hypot(...body[a].map((x, i) => x - body[b][i])));
  }
  const rotorRadius = vehicle.enlarge * 0.3 * spacing;
  MULTIROTOR_VIEWS.forEach((view, panel) => {
    g.save();
    g.translate(panel * size, 0);
    g.strokeStyle = 'rgb(170,170,170)'; g.lineWidth = 1;
    g.strokeRect(half - scale * box, half - scale * box, 2 * scale * box, 2 * scale * box);
    if (pose) {
      const at = (point) => multirotorPixel(point, view, size, box);
      const [cx, cy] = at(pose.position);
      // a rotor disc seen from the side is an ellipse: its major axis across the viewing direction
      const n = pose.normal, e = [0, 0, 0];
      e[view.depth] = 1;
      const across = [e[1] * n[2] - e[2] * n[1], e[2] * n[0] - e[0] * n[2], e[0] * n[1] - e[1] * n[0]];
      const minor = Math.max(scale * rotorRadius * Math.abs(n[view.depth]), 1.5);
      const angle = Math.atan2(-across[view.up], across[view.right]);
      const order = [0, 1, 2, 3].sort((a, b) => view.sign * (pose.rotors[a][view.depth] - pose.rotors[b][view.depth]));
      for (const i of order) {  // far to near
        const c = MULTIROTOR_IDLE.map((v, k) => Math.round(v + pose.command[i] * (MULTIROTOR_FULL[k] - v)));
        const [x, y] = at(pose.rotors[i]);
        g.fillStyle = `rgb(${c.join(',')})`;
        g.beginPath(); g.ellipse(x, y, scale * rotorRadius, minor, angle, 0, 2 * Math.PI); g.fill();
      }
      g.lineCap = 'round'; g.lineWidth = 6;
      body.forEach((r, i) => {  // over the rotors, so the pose reads at any attitude
        const [x, y] = at(pose.rotors[i]);
        g.strokeStyle = r[0] > 0 ? 'rgb(204,60,60)' : 'rgb(70,70,70)';
        g.beginPath(); g.moveTo(cx, cy); g.lineTo(x, y); g.stroke();
      });
      g.fillStyle = '#000'; g.beginPath(); g.arc(cx, cy, 5, 0, 2 * Math.PI); g.fill();
      const [tx, ty] = at(pose.position.map((x, i) => x + vehicle.enlarge * 0.03 * n[i]));
      g.strokeStyle = 'rgb(230,150,0)'; g.lineWidth = 4;
      g.beginPath(); g.moveTo(cx, cy); g.lineTo(tx, ty); g.stroke();
    }
    g.strokeStyle = 'rgb(0,160,0)'; g.lineWidth = 3;  // the target, last: never hidden
    g.beginPath(); g.moveTo(half - 6, half); g.lineTo(half + 6, half); g.moveTo(half, half - 6); g.lineTo(half, half + 6); g.stroke();
    g.fillStyle = '#666'; g.font = '12px system-ui, sans-serif'; g.textAlign = 'right'; g.textBaseline = 'bottom';
    g.fillText(panel ? 'side (x, z)' : 'top (x, y)', size - 8, size - 6);
    g.restore();
  });
  g.strokeStyle = 'rgb(170,170,170)'; g.lineWidth = 2;
  g.beginPath(); g.moveTo(size, 0); g.lineTo(size, size); g.stroke();
}

if (typeof module !== 'undefined') module.exports = { MULTIROTOR_VIEWS, multirotorPose, multirotorPixel, drawMultirotor };
