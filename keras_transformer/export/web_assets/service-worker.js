// Keeps the site for offline use. Installing stores every file of the site (FILES); then each
// same-origin GET goes to the network first (the stored copy refreshed when it answers) and is
// answered from the store when the network fails. CACHE and FILES are written by
// `kt.export.web` for each site: CACHE names the files' contents, so that a site exported
// again installs anew and drops its former copy (the store of this site's scope alone).
const CACHE = 'kt-web';
const FILES = ['./'];
const STORE = `${CACHE} ${self.registration.scope}`;
const store = () => caches.open(STORE);
self.addEventListener('install', (event) => {
  event.waitUntil(store().then((cache) => cache.addAll(FILES)).then(() => self.skipWaiting()));
});
self.addEventListener('activate', (event) => {
  const former = (name) => name !== STORE && name.startsWith('kt-web')
    && name.endsWith(` ${self.registration.scope}`);
  event.waitUntil(
    caches.keys()
      .then((names) => Promise.all(names.filter(former).map((name) => caches.delete(name))))
      .then(() => self.clients.claim()),
  );
});
self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== 'GET' || url.origin !== self.location.origin) return;
  event.respondWith(
    fetch(event.request).then((response) => {
      if (response.ok) {
        const copy = response.clone();
        event.waitUntil(store().then((cache) => cache.put(event.request, copy)));
      }
      return response;
    }).catch(() => store()
      .then((cache) => cache.match(event.request))
      .then((hit) => hit || Response.error())),
  );
});
