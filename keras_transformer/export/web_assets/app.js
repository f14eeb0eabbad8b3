// The page of a `kt.export.web` site: LiteRT.js (shipped beside it) runs model.tflite, a
// builtin-ops LiteRT file that takes a text's UTF-8 bytes (int32 [1, N], 0-padded) and gives
// the translation's (int32 [1, M]). Nothing is loaded from another host.
import {loadLiteRt, loadAndCompile, Tensor} from './litertjs/litertjs-core.js';

const $ = (id) => document.getElementById(id);
const encoder = new TextEncoder();
const decoder = new TextDecoder();  // invalid UTF-8 as U+FFFD

// Bytes of `text` in a 0-padded row of `width`, cut at a character's start.
function encoded(text, width) {
  const bytes = encoder.encode(text);
  let end = Math.min(bytes.length, width);
  if (end < bytes.length) while (end > 0 && (bytes[end] & 0xC0) === 0x80) end--;
  const row = new Int32Array(width);
  row.set(bytes.subarray(0, end));
  const stop = row.indexOf(0);  // a 0 byte ends the text
  if (stop >= 0) row.fill(0, stop);
  return row;
}

function decoded(row) {
  const stop = row.indexOf(0);
  return decoder.decode(Uint8Array.from(stop < 0 ? row : row.subarray(0, stop)));
}

// The model file, read with progress (its size from Content-Length or the manifest).
async function fetchModel(url, size) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  const total = Number(response.headers.get('Content-Length')) || size || 0;
  const reader = response.body.getReader();
  const parts = [];
  let read = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    parts.push(value);
    read += value.length;
    if (total) $('progress').value = read / total;
  }
  const model = new Uint8Array(read);
  let at = 0;
  for (const part of parts) { model.set(part, at); at += part.length; }
  return model;
}

async function load() {
  const manifest = await (await fetch('./manifest.json')).json();
  const signature = manifest.signatures.serving_default;
  const data = (manifest.experiment || {}).data || {};
  if (data.source_language && data.target_language) {
    $('title').textContent = `Translate ${data.source_language} → ${data.target_language}`;
    document.title = $('title').textContent;
  }
  const bytes = await fetchModel('./model.tflite', manifest.sizes && manifest.sizes['model.tflite']);
  $('progress').value = 1;
  $('status').textContent = 'Starting LiteRT…';
  await loadLiteRt('./litertjs/litert_wasm_compat_internal.js');
  const model = await loadAndCompile(bytes, {accelerator: 'wasm'});
  return {model, width: signature.input_bytes};
}

const ready = load();
let queue = Promise.resolve();

// The translation of `text`: a Promise of a string. Requests run one at a time.
window.translate = (text) => {
  const run = queue.then(async () => {
    const {model, width} = await ready;
    const input = new Tensor(encoded(String(text), width), [1, width]);
    const outputs = await model.run([input]);
    input.delete();
    const row = outputs[0].toTypedArray();
    for (const output of outputs) output.delete();
    return decoded(row);
  });
  queue = run.catch(() => {});
  return run;
};

ready.then(() => {
  $('progress').hidden = true;
  $('status').textContent = 'Ready.';
  $('go').disabled = false;
  window.translatorReady = true;
}, (error) => {
  $('status').textContent = `The model could not be loaded: ${error.message || error}`;
  window.translatorError = String(error && error.message || error);
});

$('go').addEventListener('click', async () => {
  $('go').disabled = true;
  $('status').textContent = 'Translating…';
  try {
    $('translation').textContent = await window.translate($('text').value);
    $('status').textContent = 'Ready.';
  } catch (error) {
    $('status').textContent = `Failed: ${error.message || error}`;
  } finally {
    $('go').disabled = false;
  }
});

// Offline once loaded: a service worker keeps the site's files (where the browser allows
// one: https, or localhost).
if ('serviceWorker' in navigator && window.isSecureContext) {
  navigator.serviceWorker.register('./service-worker.js').catch(() => {});
}
