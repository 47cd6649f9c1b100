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
  Object.defineProperty(window, "__cbDeliver", {
    value: function (msg) {
      if (msg.id && pending[msg.id]) {
        var p = pending[msg.id];
        delete pending[msg.id];
        if (msg.error) { p.reject(new Error(msg.error)); } else { p.resolve(msg.result); }
        return;
      }
      if (msg.event === "state" && subs[msg.key]) {
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
      get: function (key) { return request("get", {key: String(key)}); },
      set: function (key, value) { return request("set", {key: String(key), value: value === undefined ? null : value}); },
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
  Object.defineProperty(window, "cloudbrowser", {value: Object.freeze(api), enumerable: true});
})(__CB_CONFIG__);
