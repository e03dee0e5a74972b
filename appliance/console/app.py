"""The console's web application (Starlette, served by uvicorn: appliance/cli/serve.py).

Every page is rendered on the server from the run store through the store's reader and the
report's own row builders (reports/rows.py), so a number reads the same here and in report.html.
Nothing outside the store directory is served: run and cell names are one path segment each,
resolved under the store (index.run_dir). Only the host names it was started for are answered
(hosts.py); a state change (start, stop, the lab's check) needs an operator, a CSRF token and a
page of the console's own origin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from longhaul.appliance.console import index, lab, live, plans, starts, suites
from longhaul.appliance.console.auth import Csrf, User, Users, authenticate
from longhaul.appliance.console.derived import FETCH_WAIT_S, INLINE_WAIT_S, Derived
from longhaul.appliance.console.hosts import AllowedHosts, HostGuard
from longhaul.collectors.store.format import StoreError
from longhaul.collectors.studies.registry import SECTIONS
from longhaul.reports import plots, render, rows
from longhaul.reports.templating import environment

HERE = Path(__file__).parent
LIVE_POLL_S = 0.5           # how often the live stream looks at the store
HEARTBEAT_S = 15.0          # a comment line that keeps proxies from closing an idle stream
RECONNECT_MS = 2000         # EventSource's retry after a drop
PLAN_WAIT_S = 300.0         # a plan's report draws a few figures
SUITES_WAIT_S = 300.0       # every suite's history, from every run in the store
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


@dataclass(frozen=True)
class ConsoleSettings:
    store: Path                       # the run store: one directory per run
    users: Users | None = None        # None: loopback only, the local user is an operator
    config: Path | None = None        # the lab's config.toml: the lab page's `longhaul check`, what runs start
    start_logs: Path | None = None    # where the output of runs started here is kept (default: a temporary folder)
    plans: Path | None = None         # the facility plans' folder (`longhaul plan` writes plans/NAME-TIME)
    hosts: AllowedHosts = AllowedHosts.of("127.0.0.1")   # the names it answers to (hosts.py)


def create_app(settings: ConsoleSettings, csrf: Csrf | None = None) -> Starlette:
    env = environment(SECTIONS)
    assert env.loader is not None                     # the report's templates: the console's pages extend them
    env.loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(HERE / "templates"), env.loader])
    console = _Console(settings, env, csrf or Csrf())
    routes = [
        Route("/", lambda r: RedirectResponse("/runs", 303)),
        Route("/favicon.ico", lambda r: Response(status_code=204)),   # pages of their own (a plan's report) ask
        Route("/runs", console.runs),
        Route("/runs/{run}", console.run),
        Route("/runs/{run}/sections", console.sections),
        Route("/runs/{run}/cells/{cell}", console.cell),
        Route("/runs/{run}/live", console.live_page),
        Route("/runs/{run}/live/events", console.live_events),
        Route("/runs/{run}/stop", console.stop, methods=["POST"]),
        Route("/compare", console.compare),
        Route("/compare/result", console.compare_result),
        Route("/suites", console.suites),
        Route("/plans", console.plans),
        Route("/plans/{plan}", console.plan),
        Route("/start", console.start_page),
        Route("/start", console.start, methods=["POST"]),
        Route("/lab", console.lab),
        Route("/lab/check", console.lab_check, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(HostGuard, allowed=settings.hosts),      # first: before any route or login
                  Middleware(BaseHTTPMiddleware, dispatch=console.guard)]
    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: console.error},
                     lifespan=console.lifespan)


class _Console:
    def __init__(self, settings: ConsoleSettings, env: jinja2.Environment, csrf: Csrf):
        self.settings, self.env, self.csrf = settings, env, csrf
        self.last_check: lab.CheckResult | None = None
        self.derived = Derived()
        self.feeds = live.Feeds(LIVE_POLL_S)
        self.starts = starts.Starts(settings.config, settings.store, settings.start_logs) if settings.config else None

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        yield
        self.derived.close()
        if self.starts is not None:
            await run_in_threadpool(self.starts.close)

    # ---- every request ----------------------------------------------------------------------

    async def guard(self, request: Request, call_next) -> Response:
        user = authenticate(self.settings.users, request.headers.get("authorization", ""))
        if user is None:
            return PlainTextResponse("authentication required", 401,
                                     headers={"WWW-Authenticate": 'Basic realm="longhaul console"'})
        request.state.user = user
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        return response

    def page(self, request: Request, template: str, status: int = 200, **context) -> HTMLResponse:
        user: User = request.state.user
        html = self.env.get_template(template).render(user=user, csrf=self.csrf.token(user), **context)
        return HTMLResponse(html, status)

    def fragment(self, template: str, **context) -> HTMLResponse:
        """A part of a page, fetched by static/fragments.js into the page that asked for it."""
        return HTMLResponse(self.env.get_template(template).render(**context), headers={"Cache-Control": "no-store"})

    async def error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)         # registered for HTTPException only
        if not hasattr(request.state, "user"):
            return PlainTextResponse(exc.detail, exc.status_code)
        return self.page(request, "error.html.j2", exc.status_code, code=exc.status_code, detail=exc.detail)

    def _run(self, name: str):
        try:
            return index.load_run(self.settings.store, name)
        except index.NotFound:
            raise HTTPException(404, f"no run {name!r} in the store") from None

    def _run_path(self, name: str) -> Path:
        """The run's folder without loading it (404 as _run)."""
        path = index.run_dir_or_none(self.settings.store, name)
        if path is None:
            raise HTTPException(404, f"no run {name!r} in the store")
        return path

    # ---- pages --------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        q = request.query_params
        keep = index.RunFilter(**{k: q.get(k, "").strip()[:64] for k in ("profile", "suite", "status", "kernel",
                                                                         "since", "until")})
        listing = await run_in_threadpool(index.list_runs, self.settings.store, keep)
        return self.page(request, "runs.html.j2", listing=listing, keep=keep, store=str(self.settings.store))

    async def run(self, request: Request) -> Response:
        store = await run_in_threadpool(self._run, request.path_params["run"])
        context = await run_in_threadpool(_run_context, store)
        ready, studies = await self._sections_of(store.run_id, INLINE_WAIT_S, lambda: store)
        return self.page(request, "run.html.j2", **context, studies=studies if ready else None)

    async def sections(self, request: Request) -> Response:
        """The run's study sections alone (the run page fetches them when they take long)."""
        name = request.path_params["run"]
        ready, studies = await self._sections_of(name, FETCH_WAIT_S, lambda: self._run(name))
        if not ready:
            return PlainTextResponse("still computing", 202, headers={"Cache-Control": "no-store"})
        return self.fragment("sections.html.j2", studies=studies)

    async def _sections_of(self, name: str, wait_s: float, load):
        """(ready, Studies): the key from stat calls; the store is loaded only when computed."""
        path = self._run_path(name)
        key = ("sections", str(path), await run_in_threadpool(live.store_key, path))
        return await self.derived.within(key, lambda: _studies(load(), self.env), wait_s)

    async def cell(self, request: Request) -> Response:
        store = await run_in_threadpool(self._run, request.path_params["run"])
        cell = next((c for c in store.entries if c.id == request.path_params["cell"]), None)
        if cell is None:
            raise HTTPException(404, f"run {store.run_id} has no cell {request.path_params['cell']!r}")
        colors = plots.flow_colors(rows.flow_names(cell))
        section = await run_in_threadpool(
            lambda: rows.cell_section(cell, rows.load_series(store, cell), colors))
        return self.page(request, "cell.html.j2", run_id=store.run_id, cell=section,
                         verification=rows.verification_row(cell), result=rows.result_row(cell))

    async def live_page(self, request: Request) -> Response:
        store = await run_in_threadpool(self._run, request.path_params["run"])
        return self.page(request, "live.html.j2", run_id=store.run_id, live=self._is_live(store.run_dir))

    async def live_events(self, request: Request) -> Response:
        path = index.run_dir_or_none(self.settings.store, request.path_params["run"])
        if path is None:
            raise HTTPException(404, "no such run")

        async def stream():
            yield f"retry: {RECONNECT_MS}\n\n"
            last, quiet = None, 0.0
            while not await request.is_disconnected():
                try:
                    text, running = await run_in_threadpool(self.feeds.look, path, self._is_live)
                except StoreError as e:              # a summary mid-replace: the next look reads it
                    yield f": {str(e)[:200]}\n\n"
                    text = None
                if text is not None and text != last:
                    last, quiet = text, 0.0
                    yield f"data: {text}\n\n"
                    if not running:
                        yield "event: end\ndata: {}\n\n"
                        return
                quiet += LIVE_POLL_S
                if quiet >= HEARTBEAT_S:
                    quiet = 0.0
                    yield ": alive\n\n"
                await asyncio.sleep(LIVE_POLL_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def stop(self, request: Request) -> Response:
        await self._operator_post(request)
        path = index.run_dir_or_none(self.settings.store, request.path_params["run"])
        if path is None:
            raise HTTPException(404, "no such run")
        marker = next((m for m in index.live_runs() if m.run_dir.resolve() == path), None)
        if marker is None:
            raise HTTPException(409, "the run is not running")
        try:
            os.kill(marker.pid, signal.SIGINT)   # the run's own teardown ends what it started
        except PermissionError:
            raise HTTPException(403, f"this console may not signal the run's process {marker.pid} "
                                     f"(run it as the user who runs longhaul)") from None
        except ProcessLookupError:
            raise HTTPException(409, "the run has just ended") from None
        return RedirectResponse(f"/runs/{path.name}/live", 303)

    async def compare(self, request: Request) -> Response:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        ready, result = (await self._comparison_of(a, b, INLINE_WAIT_S)) if a and b else (True, None)
        names = await run_in_threadpool(index.run_names, self.settings.store)
        return self.page(request, "compare.html.j2", a=a, b=b, result=result, pending=not ready, runs=names)

    async def compare_result(self, request: Request) -> Response:
        """The comparison alone (the compare page fetches it when it takes long)."""
        ready, result = await self._comparison_of(request.query_params.get("a", ""),
                                                  request.query_params.get("b", ""), FETCH_WAIT_S)
        if not ready:
            return PlainTextResponse("still computing", 202, headers={"Cache-Control": "no-store"})
        return self.fragment("compare_result.html.j2", result=result)

    async def _comparison_of(self, a: str, b: str, wait_s: float):
        """(ready, result): the key from stat calls; the two stores are loaded only when computed."""
        paths = [self._run_path(name) for name in (a, b)]
        key = ("compare", *(str(p) for p in paths), *[await run_in_threadpool(live.store_key, p) for p in paths])
        return await self.derived.within(key, lambda: _comparison(self._run(a), self._run(b)), wait_s)

    async def suites(self, request: Request) -> Response:
        store = self.settings.store
        key = ("suites", await run_in_threadpool(index.store_key, store))
        _, views = await self.derived.within(key, lambda: suites.suite_views(store), SUITES_WAIT_S)
        schedules = await run_in_threadpool(lambda: {v.name: suites.schedule_of(v.name) for v in views})
        return self.page(request, "suites.html.j2", suites=views, schedules=schedules)

    async def plans(self, request: Request) -> Response:
        listing = await run_in_threadpool(plans.list_plans, self.settings.plans)
        return self.page(request, "plans.html.j2", plans=listing, folder=self.settings.plans)

    async def plan(self, request: Request) -> Response:
        try:
            folder = plans.plan_folder(self.settings.plans, request.path_params["plan"])
        except index.NotFound:
            raise HTTPException(404, "no such plan") from None
        key = ("plan", str(folder), await run_in_threadpool(live.files_key, [folder / plans.PLAN_JSON, folder / plans.REPLAY_PATH]))
        try:
            _, html = await self.derived.within(key, lambda: plans.plan_page(folder), PLAN_WAIT_S)
        except ValueError as e:              # a plan.json of another format or version
            raise HTTPException(422, f"the plan does not read: {e}") from None
        return HTMLResponse(html)

    async def start_page(self, request: Request) -> Response:
        offered = await run_in_threadpool(starts.startables, self.starts.config) if self.starts else []
        if self.starts is not None:
            for going in self.starts.started:
                if going.run_dir is None:      # its marker came after the start's wait: one look now
                    self.starts.find_run(going, 0.0)
        return self.page(request, "start.html.j2", offered=offered, config=self.settings.config,
                         started=list(reversed(self.starts.started)) if self.starts else [])

    async def start(self, request: Request) -> Response:
        await self._operator_post(request)
        if self.starts is None:
            raise HTTPException(409, "the console was started without a config (longhaul serve --config)")
        form = await request.form()
        kind, name = str(form.get("kind", "")), str(form.get("name", ""))
        try:
            started = await run_in_threadpool(self.starts.start, kind, name)
        except starts.StartRefused as e:
            raise HTTPException(409, str(e)) from None
        if started.run_dir is not None and started.status is None:
            return RedirectResponse(f"/runs/{started.run_dir.name}/live", 303)
        return RedirectResponse(f"/start#start-{started.number}", 303)

    async def lab(self, request: Request) -> Response:
        return self.page(request, "lab.html.j2", config=self.settings.config, check=self.last_check)

    async def lab_check(self, request: Request) -> Response:
        await self._operator_post(request)
        if self.settings.config is None:
            raise HTTPException(409, "the console was started without a config (longhaul serve --config)")
        self.last_check = await run_in_threadpool(lab.run_check, self.settings.config)
        return RedirectResponse("/lab", 303)

    async def _operator_post(self, request: Request) -> None:
        """A state change: the operator role, this page's CSRF token, this console's origin."""
        user: User = request.state.user
        if not user.operator:
            raise HTTPException(403, "this needs the operator role")
        form = await request.form()
        origin = request.headers.get("origin") or request.headers.get("referer") or ""
        if not self.csrf.valid(user, str(form.get("csrf", ""))) or \
                not self.settings.hosts.same_origin(origin, request.headers.get("host", "")):
            raise HTTPException(403, "the request did not come from this console's page (CSRF check)")

    def _is_live(self, run_dir: Path) -> bool:
        return Path(run_dir).resolve() in index.live_run_dirs()


def _run_context(store) -> dict:
    return {"header": rows.header(store), "verification": [rows.verification_row(c) for c in store.entries],
            "results": [rows.result_row(c) for c in store.entries], "problems": list(store.problems),
            "run_id": store.run_id,
            "row": index.run_row(store, Path(store.run_dir).resolve() in index.live_run_dirs())}


@dataclass(frozen=True)
class Studies:
    sections: list           # rendered template modules, as the report places them
    notes: list[str]         # what a section could not show


def _studies(store, env: jinja2.Environment) -> Studies:
    notes: list[str] = []
    return Studies(render.render_sections(env, store, SECTIONS, notes), notes)


def _comparison(base, new) -> dict:
    """What `longhaul compare` computes (collectors/studies/regression), for the page to show."""
    from longhaul.collectors.store.fingerprint import diff_fingerprints, fingerprint_of, summarise
    from longhaul.collectors.studies.registry import RUN_METRICS
    from longhaul.collectors.studies.regression.compare import CompareError, compare_runs
    from longhaul.collectors.studies.regression.samples import scenario_label

    try:
        comparison, error = compare_runs(base, new, run_metrics=RUN_METRICS), None
    except CompareError as e:
        comparison, error = None, str(e)
    changes = summarise(diff_fingerprints(fingerprint_of(base.manifest), fingerprint_of(new.manifest)))
    rows = [{"scenario": scenario_label(r.scenario, r.calibration), "metric": f"{r.metric} {r.unit}".strip(),
             "n": f"{r.n_base}+{r.n_new}", "medians": f"{r.base_median:.4g} -> {r.new_median:.4g}",
             "shift": f"{r.shift:+.3g}" + (f" ({r.relative * 100:+.1f} %)" if r.relative is not None else ""),
             "ci": f"[{r.ci_low:+.3g}, {r.ci_high:+.3g}]", "p": "" if r.p is None else f"{r.p:.2g}",
             "verdict": r.verdict, "note": r.note} for r in (comparison.rows if comparison else [])]
    return {"comparison": comparison, "rows": rows, "error": error, "changes": changes}
