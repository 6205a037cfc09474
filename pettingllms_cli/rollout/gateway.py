"""The HTTP side of the endpoint: a FastAPI app over a `Completer` (chat.py), and a uvicorn server run in a thread
for the length of an external rollout.

Served on its own (`pettingllms serve`) the app answers `/v1/models` and `/v1/chat/completions`. During an external
rollout it answers only under `/episodes/<id>/v1/...`: the id in the path says which running episode a completion
belongs to, the episode book fixes how it is sampled and records it; an id that is not running gets 404. Every error
is in OpenAI's shape, so the `openai` client raises its usual exceptions.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

import uvicorn
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from pettingllms_cli.rollout.chat import (
    ApiError,
    ChatRequest,
    Completer,
    Completion,
    Settings,
    models_list,
    parse_request,
    response,
)

STARTUP_SECONDS = 30  # a server that has not bound its port by then will not


class EpisodeBook(Protocol):
    """What the gateway asks of an external rollout about the episode a request names."""

    def begin(self, episode: str, agent: str, request: ChatRequest) -> tuple[int, Settings]:
        """The call's index among this agent's calls in the episode, and how to sample it; ApiError 404 when the
        episode is not running."""
        ...

    def record(self, episode: str, index: int, completion: Completion) -> None:
        """Keep the sampled completion as an action of the episode (dropped if the episode has ended meanwhile)."""
        ...


def error(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    e = ApiError(status, message, param, code)
    return JSONResponse(e.body(), status_code=status)


def make_app(completer: Completer, book: EpisodeBook | None = None) -> FastAPI:
    """The OpenAI-compatible routes: served (`book` None) or per episode of an external rollout."""
    app = FastAPI(title="pettingllms", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        return error(400, f"malformed request: {e.errors()[0].get('msg', e)}")

    @app.exception_handler(HTTPException)
    async def _http(request: Request, e: HTTPException) -> JSONResponse:
        return error(e.status_code, f"{request.method} {request.url.path}: {e.detail}")

    async def body_of(request: Request) -> ChatRequest:
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "malformed request: the body is not JSON") from None
        return parse_request(body)

    if book is None:

        @app.get("/v1/models")
        def _models() -> dict:
            return models_list(completer)

        @app.post("/v1/chat/completions")
        async def _chat(request: Request) -> dict:
            chat = await body_of(request)
            completion = await run_in_threadpool(completer.complete, chat)
            return response(completer, completion, bool(chat.tools))

        return app

    @app.get("/episodes/{episode}/v1/models")
    def _episode_models(episode: str) -> dict:
        return models_list(completer)

    @app.post("/episodes/{episode}/v1/chat/completions")
    async def _episode_chat(episode: str, request: Request) -> dict:
        chat = await body_of(request)
        completer.check_agent(chat.model)
        index, settings = book.begin(episode, chat.model, chat)
        completion = await run_in_threadpool(completer.complete, chat, settings)
        book.record(episode, index, completion)
        return response(completer, completion, bool(chat.tools))

    return app


class ServerThread:
    """uvicorn serving `app` on host:port (0: any free port) in a daemon thread, while the `with` block runs."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0):
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="pettingllms-gateway", daemon=True)
        self.host, self.port = host, port

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the endpoint did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
