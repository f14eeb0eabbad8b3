// The page of a `kt.export.web` site: LiteRT.js (shipped beside it) runs model.tflite, a
// builtin-ops LiteRT file that takes a text's UTF-8 bytes (int32 [1, N], 0-padded) and gives
// the translation's (int32 [1, M]); an NLLB-200 model's file also takes the source and target
// languages (int32 [1]: a code's index in the manifest's `languages`, -1 for none), picked in
// two selects. Nothing is loaded from another host.
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
  const languages = showLanguages(manifest);  // where shown, the selects name the languages
  if (!languages && data.source_language && data.target_language) {
    $('title').textContent = `Translate ${data.source_language} → ${data.target_language}`;
    document.title = $('title').textContent;
  }
  const bytes = await fetchModel('./model.tflite', manifest.sizes && manifest.sizes['model.tflite']);
  $('progress').value = 1;
  $('status').textContent = 'Starting LiteRT…';
  await loadLiteRt('./litertjs/litert_wasm_compat_internal.js');
  const model = await loadAndCompile(bytes, {accelerator: 'wasm'});
  return {model, width: signature.input_bytes, languages};
}

// An NLLB-200 file's languages (the manifest's codes) in the two selects, the export's own
// first (its --source-language and --target-language); null for a model without any.
function showLanguages(manifest) {
  const listed = manifest.languages || {};
  const codes = {source: listed.source || [], target: listed.target || []};
  const inputs = manifest.signatures.serving_default.inputs;
  if (!codes.target.length || !('target_language' in inputs)) return null;
  const decoding = manifest.decoding || {};
  const chosen = {source: decoding.source_prefix, target: decoding.target_prefix};
  for (const side of ['source', 'target']) {
    const select = $(side);
    for (const code of codes[side]) select.add(new Option(code, code));
    select.value = codes[side].includes(chosen[side]) ? chosen[side] : codes[side][0];
  }
  $('languages').hidden = false;
  return codes;
}

// A language code's index in the file's list: -1 for none, an Error for a code it lacks.
function languageIndex(codes, code, side) {
  if (!code) return -1;
  const index = codes.indexOf(code);
  if (index < 0) throw new Error(`${side} language ${JSON.stringify(code)} is not one of ${codes.join(', ')}`);
  return index;
}

const ready = load();
let queue = Promise.resolve();

// The translation of `text`: a Promise of a string. Requests run one at a time. For an
// NLLB-200 model, `options.source` and `options.target` are language codes (the selects'
// where left out).
window.translate = (text, options = {}) => {
  const run = queue.then(async () => {
    const {model, width, languages} = await ready;
    const inputs = {text: new Tensor(encoded(String(text), width), [1, width])};
    try {
      if (!languages && (options.source !== undefined || options.target !== undefined)) {
        throw new Error('this model takes no language codes (it has no language selects)');
      }
      if (languages) {
        for (const side of ['source', 'target']) {
          const code = options[side] === undefined ? $(side).value : options[side];
          const index = languageIndex(languages[side], code, side);
          inputs[`${side}_language`] = new Tensor(Int32Array.of(index), [1]);
        }
      }
      const outputs = await model.run(inputs);
      const row = outputs.translations.toTypedArray();
      for (const output of Object.values(outputs)) output.delete();
      return decoded(row);
    } finally {
      for (const input of Object.values(inputs)) input.delete();
    }
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
