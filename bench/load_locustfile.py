"""Locust scenario for ``bench/load.py`` (``make load``); runs in locust's own virtualenv.

Three kinds of users against one server, each at a fixed pace (``constant_pacing``) so
the load is the same whatever the latency:

* agents (``LOAD_AGENTS``): open a flow, write 3 steps one request each (one with a PII
  field, so encryption runs), close it, then send 2 whole flows through the bulk ingest;
* operators (``LOAD_OPERATORS``): log in once, then read the dashboard, the flow list and a
  flow's DAG page in turn;
* patients (one user per seeded patient): log in once, then read one of their own
  decisions, in turn through the narrative API (their patient-bound token) and the
  narrative page (their session).

The seed (tokens, logins, flow ids) comes from the JSON file ``LOAD_SEED_FILE``. Every
request is recorded as ``[name, started (epoch s), ms, status]`` (status 0: no answer) and
written to ``LOAD_RESULTS_FILE`` when locust stops; ``load.py`` computes the figures.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
import uuid
from typing import Any

from locust import FastHttpUser, constant_pacing, events

SEED: dict[str, Any] = json.loads(open(os.environ["LOAD_SEED_FILE"]).read())  # noqa: SIM115
RESULTS_FILE = os.environ["LOAD_RESULTS_FILE"]
AGENT_PACING_S = float(os.environ.get("LOAD_AGENT_PACING", "1.5"))
OPERATOR_PACING_S = float(os.environ.get("LOAD_OPERATOR_PACING", "2"))
PATIENT_PACING_S = float(os.environ.get("LOAD_PATIENT_PACING", "15"))
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')

RECORDS: list[list[Any]] = []
PATIENTS = itertools.cycle(SEED["patients"])


def _record(request_type: str, name: str, response_time: float, response: Any, **kwargs: Any) -> None:
    status = getattr(response, "status_code", 0) or 0  # 0: no answer (connection error, timeout)
    RECORDS.append([f"{request_type} {name}", time.time() - response_time / 1000, round(response_time, 3), status])


def _write_results(**kwargs: Any) -> None:
    with open(RESULTS_FILE, "w") as out:
        json.dump(RECORDS, out)


events.request.add_listener(_record)
events.quitting.add_listener(_write_results)


def _login(user: FastHttpUser, username: str, password: str) -> None:
    page = user.client.get("/accounts/login/", name="/accounts/login/")
    match = CSRF.search(page.text or "")
    user.client.post(
        "/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": match.group(1) if match else ""},
        headers={"Referer": f"{user.host}/accounts/login/"},
        allow_redirects=False,
        name="/accounts/login/",
    )


def _step(n: int, pii: bool) -> dict[str, Any]:
    kind = ("retrieval", "llm_prompt", "verdict")[n % 3]
    body: dict[str, Any] = {
        "kind": kind,
        "agent": "load-agent",
        "summary_text": f"Load step {n} reviewed the evidence",
        "inputs": {"query": "labs"},
        "outputs": {"hits": 3},
        "confidence": 0.9,
        "latency_ms": 12,
    }
    if pii:
        body["inputs"]["patient_name"] = "Load Patient"
        body["pii_fields"] = ["patient_name"]
    return body


FLOW = {"trigger_type": "user_question", "agent": "load-agent", "trigger_summary": "Load question"}
CLOSE = {"flow_state": "completed", "outcome_type": "recommendation_delivered", "outcome_summary": "Load outcome"}


class Agent(FastHttpUser):  # type: ignore[misc]  # locust is not installed in the project
    fixed_count = int(os.environ.get("LOAD_AGENTS", "4"))
    wait_time = constant_pacing(AGENT_PACING_S)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {SEED['write_token']}", "Content-Type": "application/json"}

    def write(self) -> None:
        ref = uuid.uuid4().hex
        opened = self.client.post(
            "/api/reasoning/flows",
            json={**FLOW, "trigger_ref": f"load/{ref}"},
            headers=self.headers,
            name="/api/reasoning/flows",
        )
        flow_id = (opened.json() or {}).get("id") if opened.status_code == 201 else None
        if flow_id:
            for n in range(3):
                self.client.post(
                    f"/api/reasoning/flows/{flow_id}/steps",
                    json=_step(n, pii=n == 0),
                    headers=self.headers,
                    name="/api/reasoning/flows/{id}/steps",
                )
            self.client.patch(
                f"/api/reasoning/flows/{flow_id}", json=CLOSE, headers=self.headers, name="/api/reasoning/flows/{id}"
            )
        steps = [_step(n, pii=n == 0) for n in range(3)]
        flows = [{**FLOW, "trigger_ref": f"load/{ref}/{i}", "steps": steps, "close": CLOSE} for i in range(2)]
        self.client.post(
            "/api/reasoning/ingest", json={"flows": flows}, headers=self.headers, name="/api/reasoning/ingest"
        )

    tasks = [write]  # (a list, not @task: locust is untyped, and its decorator would untype the method)


class Operator(FastHttpUser):  # type: ignore[misc]
    fixed_count = int(os.environ.get("LOAD_OPERATORS", "2"))
    wait_time = constant_pacing(OPERATOR_PACING_S)

    def on_start(self) -> None:
        _login(self, SEED["operator"]["username"], SEED["operator"]["password"])
        self.flows = itertools.cycle(SEED["page_flow_ids"])
        self.pages = itertools.cycle(("dashboard", "list", "flow"))

    def _page(self, path: str, name: str) -> None:
        # No redirect is followed: a redirect to the login page would mean the session was lost.
        with self.client.get(path, name=name, allow_redirects=False, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}")

    def read(self) -> None:
        page = next(self.pages)
        if page == "dashboard":
            self._page("/dashboard/admin/reasoning/", "/dashboard/admin/reasoning/")
        elif page == "list":
            self._page("/dashboard/admin/reasoning/flows", "/dashboard/admin/reasoning/flows")
        else:
            self._page(f"/dashboard/admin/reasoning/{next(self.flows)}", "/dashboard/admin/reasoning/{flow_id}")

    tasks = [read]


class Patient(FastHttpUser):  # type: ignore[misc]
    fixed_count = len(SEED["patients"])
    wait_time = constant_pacing(PATIENT_PACING_S)

    def on_start(self) -> None:
        self.patient = next(PATIENTS)
        _login(self, self.patient["username"], self.patient["password"])
        self.decisions = itertools.cycle(self.patient["flow_ids"])
        self.via_api = itertools.cycle((True, False))

    def read(self) -> None:
        decision = next(self.decisions)
        if next(self.via_api):
            self.client.get(
                f"/api/reasoning/flows/{decision}",
                headers={"Authorization": f"Bearer {self.patient['token']}"},
                name="/api/reasoning/flows/{id} (narrative)",
            )
        else:
            with self.client.get(
                f"/dashboard/reasoning/{decision}",
                name="/dashboard/reasoning/{id}",
                allow_redirects=False,
                catch_response=True,
            ) as response:
                if response.status_code != 200:
                    response.failure(f"{response.status_code}")

    tasks = [read]
