// window.cloudbrowser: the in-page app API of CloudBrowser, injected into
// every document of a virtual browser before the page's own scripts. The
// worker fills in the config object. It is installed only on the app's own
// origin. The raw binding stays visible to every page (Chromium makes it
// non-configurable), so each request carries a per-browser token that only
// this closure knows: other pages' calls are ignored by the worker.
(function (config) {
  "use strict";
  var call = window[config.binding];
  if (typeof call !== "function" || location.origin !== config.origin) { return; }

  var nextId = 0, pending = {}, subs = {};
  // latest[key] is the newest value of a subscribed key seen here, with its
  // write sequence number: the worker delivers events concurrently, so an
  // older one can arrive after a newer one (or after a get) and is dropped.
  var latest = {};
  function newer(key, seq, value) {
    var l = latest[key];
    if (l && l.seq > seq) { return false; }
    if (subs[key]) { latest[key] = {seq: seq, value: value}; }
    return true;
  }
  function request(op, args) {
    return new Promise(function (resolve, reject) {
      var id = ++nextId;
      pending[id] = {resolve: resolve, reject: reject};
      var msg = {id: id, op: op, token: config.token};
      for (var k in args) { msg[k] = args[k]; }
      call(JSON.stringify(msg));
    });
  }
  // The worker answers requests and pushes state changes through here.
  // Both properties stay configurable: when a pooled browser is leased to
  // the next user without a navigation, the worker installs this script
  // again and it must replace the previous user's API in the open document.
  Object.defineProperty(window, "__cbDeliver", {
    configurable: true,
    value: function (msg) {
      if (msg.id && pending[msg.id]) {
        var p = pending[msg.id];
        delete pending[msg.id];
        if (msg.error) { p.reject(new Error(msg.error)); } else { p.resolve(msg.result); }
        return;
      }
      if (msg.event === "state" && subs[msg.key] && newer(msg.key, msg.seq || 0, msg.value)) {
        subs[msg.key].slice().forEach(function (fn) {
          try { fn(msg.value, msg.key); } catch (e) { setTimeout(function () { throw e; }); }
        });
      }
    }
  });

  var api = {
    currentUser: config.user,
    app: Object.freeze({name: config.appName, mountPoint: config.mountPoint}),
    browser: Object.freeze({
      id: config.browserId,
      url: config.browserURL,
      close: function () { return request("closeBrowser", {}); },
      // grant(principal, role): role "reader", "reader-writer" or "none";
      // principal a user name or "*" for anyone with the URL.
      grant: function (principal, role) { return request("grantBrowser", {value: {principal: principal, role: role}}); }
    }),
    instance: Object.freeze({
      id: config.instanceId,
      browsers: function () { return request("browsers", {}); },
      createBrowser: function () { return request("createBrowser", {}); },
      grant: function (principal, role) { return request("grantInstance", {value: {principal: principal, role: role}}); },
      get: function (key) {
        key = String(key);
        return request("get", {key: key}).then(function (r) {
          // A change delivered while the get was on its way is newer.
          return newer(key, r.seq, r.value) ? r.value : latest[key].value;
        });
      },
      set: function (key, value) { return request("set", {key: String(key), value: value === undefined ? null : value}); },
      // append(key, value, {max}): atomically appends value to the array at
      // key (created if missing), keeping the last max entries (default 100,
      // at most 10000, fewer if needed to fit the value limit). Resolves
      // with the new length.
      append: function (key, value, opts) {
        var args = {key: String(key), value: value === undefined ? null : value};
        if (opts && opts.max !== undefined) {
          // Anything but a number would not decode on the worker.
          if (typeof opts.max !== "number" || !isFinite(opts.max)) {
            return Promise.reject(new TypeError("append: max must be a number"));
          }
          args.max = opts.max;
        }
        return request("append", args);
      },
      // subscribe(key, fn): fn(value, key) runs on every change of key made
      // by any browser of the instance (this one included). Returns a
      // function that unsubscribes.
      subscribe: function (key, fn) {
        key = String(key);
        if (typeof fn !== "function") { throw new TypeError("subscribe needs a function"); }
        if (!subs[key]) { subs[key] = []; request("subscribe", {key: key}); }
        subs[key].push(fn);
        return function () {
          var l = subs[key] || [];
          var i = l.indexOf(fn);
          if (i >= 0) { l.splice(i, 1); }
        };
      }
    })
  };
  Object.defineProperty(window, "cloudbrowser", {value: Object.freeze(api), enumerable: true, configurable: true});
})(__CB_CONFIG__);
