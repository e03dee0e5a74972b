// A part of a page that takes long to compute (appliance/console/derived.py): the page leaves an
// element with data-fragment="URL"; this asks for it until the server has it (202 means "not
// yet", each request waiting on the server up to its FETCH_WAIT_S) and puts the markup in place.
// The markup is the console's own, rendered from the store by the same templates as the page.
"use strict";
(function () {
  const RETRY_MS = 1000, ERROR_RETRY_MS = 3000;

  async function load(el) {
    let response;
    try {
      response = await fetch(el.dataset.fragment, { credentials: "same-origin", cache: "no-store" });
    } catch (e) {                                   // the console restarting: try again shortly
      setTimeout(() => load(el), ERROR_RETRY_MS);
      return;
    }
    if (response.status === 202) {
      setTimeout(() => load(el), RETRY_MS);
      return;
    }
    if (!response.ok) {
      el.textContent = `This part could not be shown: the console answered ${response.status} ${response.statusText}.`;
      el.classList.add("error");
    } else {
      el.innerHTML = await response.text();
    }
    el.removeAttribute("aria-busy");
    el.removeAttribute("data-fragment");
  }

  for (const el of document.querySelectorAll("[data-fragment]")) load(el);
})();
