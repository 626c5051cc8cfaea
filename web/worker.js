// The static page's back end, in a Web Worker: the wasm module (shige_web.js, made by
// web/build.sh) answers the page's requests, as the local server does. The page starts two: one
// that writes with the shipped run, one that trains a run in the tab (so that each answers while
// the other works). Messages in: {id, op, args}; out: {id, result} or {id, error} once, and
// {id, event, data} for each event of a poem or a training.
import init, { Poet, Training, score, config_json } from "./shige_web.js";

const ready = init();
let poet = null;
let stopping = false;

/// The static build's file at `path`, or an error that says the build is incomplete.
async function file(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(`cannot load ${path} (${r.status}): the static build is incomplete; build it again with web/build.sh`);
  return r;
}

const ops = {
  // The shipped run, from run/: the page's info for it.
  async open({ name, configs }) {
    const [config, tokenizer, model] = await Promise.all(["run/config.toml", "run/tokenizer.json", "run/model.safetensors"].map(file));
    // The poets of a run trained on titled poems (none for other runs).
    const poets = await fetch("run/poets.tsv").then(r => r.ok ? r.text() : undefined, () => undefined);
    poet = new Poet(name, await config.text(), await tokenizer.text(), new Uint8Array(await model.arrayBuffer()), poets);
    return JSON.parse(poet.info(configs));
  },
  write({ query }, id) {
    poet.write(query, (event, data) => postMessage({ id, event, data }));
    return null;
  },
  inspect: ({ query }) => JSON.parse(poet.inspect(query)),
  order: () => JSON.parse(poet.order()),
  score: ({ query }) => JSON.parse(score(query)),
  config: ({ toml }) => JSON.parse(config_json(toml)),
  train,
  stop() { stopping = true; return null; },
  // What this worker fetched, to check that it asked no other server.
  fetched: () => performance.getEntriesByType("resource").map(e => e.name),
};

/// Trains a new run of `config` (a config file's text, with `set`'s overrides) on `corpus`,
/// telling the page each evaluation (`progress`, its curve and poems so far) and its end. Between
/// steps it yields now and then, so that a stop is heard. tokens/s counts the steps' time alone,
/// as `train` does.
async function train({ name, config, set, corpus }, id) {
  stopping = false;
  const training = new Training(name, config, set, corpus);
  const run = { name, rows: [], samples: [], max_iters: training.max_iters(), config: JSON.parse(training.config()) };
  let spent = 0, yielded = performance.now();
  while (!training.is_done() && !stopping) {
    const start = performance.now();
    training.train_step();
    spent += performance.now() - start;
    if (training.evaluates_now()) {
      const { row, sample } = JSON.parse(training.evaluate(spent / 1000));
      spent = 0;
      run.rows.push(row);
      run.samples.push(sample);
      postMessage({ id, event: "progress", data: run });
    }
    if (performance.now() - yielded > 50) {
      await nextTask();
      yielded = performance.now();
    }
  }
  training.free();
  return { run, stopped: stopping };
}

/// Lets the messages that came meanwhile (a stop) be handled: a message to itself, not a timer,
/// which a browser may hold back (a background tab, the browser test's virtual time).
function nextTask() {
  return new Promise(resolve => {
    const channel = new MessageChannel();
    channel.port1.onmessage = resolve;
    channel.port2.postMessage(null);
  });
}

onmessage = async ({ data: { id, op, args } }) => {
  try {
    await ready;
    postMessage({ id, result: await ops[op](args || {}, id) });
  } catch (e) {
    postMessage({ id, error: e instanceof Error ? e.message : String(e) });
  }
};
