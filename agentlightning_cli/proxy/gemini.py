"""Google's Gemini API (`generateContent`, `streamGenerateContent`, `countTokens`) -> vLLM chat completions.

The reply side (JSON and the `alt=sse` stream) lives in `gemini_reply.py` and is re-exported here, so with
`request_to_chat` and `open_stream` this module is the Translator of translators.py (`error_body`, from
errors.py, is re-exported). The model and the method are in the URL (`/v1beta/models/{model}:{method}`), not in
the body: translated.handle_gemini reads them (`route`) and passes the model on.

Translation choices (the client's full request is recorded anyway; `dropped` lists what did not reach vLLM):
* `systemInstruction` (a Content or a string) becomes the leading system message (chat_messages.py).
* Text parts of one Content are joined with "\\n"; `thought` parts, `thoughtSignature`, inline/file data and
  other part kinds are dropped and recorded. A missing role is `user` (as Google reads it); `function` (the old
  role of function responses) reads as `user`.
* Tool-call ids. `functionCall.id` is optional in Gemini, and chat needs one per call (exact continuation compares
  calls by id + name + parsed args, continuation/normalise.py). The reply side hands out positional ids
  `call_<content index>_<call number>` (and exact continuation's chain learns those, `positional_ids`); a call
  keeps the id its client sent, and one without an id gets its positional id: the same history gives the same
  ids on every call, whether the client echoes ids or drops them. A `functionResponse`
  becomes a `tool` message answering the matching open call: the one with its id, else the first open call of
  its name, else (an answer to nothing) its own id or a positional one. So a client that makes up its own ids
  for responses (Gemini CLI does when a call came without one) still pairs every answer with its call.
* A function response object `{"output": "<text>"}` (Gemini CLI's form) goes upstream as the text; any other
  response object as its JSON.
* Schemas (`parameters`, `responseSchema`) are Gemini's OpenAPI subset with UPPERCASE types: normalised to JSON
  Schema (lowercase types, `nullable` -> a "null" type, `propertyOrdering` dropped); `parametersJsonSchema` and
  `responseJsonSchema` are JSON Schema already and go as they are.
* `toolConfig.functionCallingConfig.mode`: AUTO -> auto, ANY -> required (or the one function when
  `allowedFunctionNames` names exactly one), NONE -> none. `candidateCount` > 1 is refused (one candidate per
  call keeps the record one-to-one with its training row). `thinkingConfig`, `safetySettings`, `cachedContent`,
  logprob requests and other generation fields chat has no match for are dropped and recorded; `thinkingConfig`
  and `thought` parts under the names Anthropic's `thinking` uses (`dropped["thinking"]`, `dropped["blocks"]`),
  so exact continuation counts them as the reasoning normalisation and keys chains by the thinking setting.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .chat_messages import ChatMessages, apply_tool_choice, convert_tools
from .chat_messages import note as _note
from .errors import TranslationError
from .errors import gemini_error_body as error_body  # noqa: F401  (re-exported interface)
from .gemini_reply import StreamTranslator, call_id, response_from_chat  # noqa: F401  (re-exported interface)
from .gemini_reply import positional_ids  # noqa: F401  (re-exported: translated.py passes it to exact_chat)

PROTOCOL = "gemini-generate-content"

# `/v1beta/models/gemini-2.5-pro:streamGenerateContent` -> (model, method). Tuned models live under tunedModels/.
ROUTE = re.compile(r"^/(?:v1beta|v1alpha|v1)/((?:models|tunedModels)/[^/:]+):"
                   r"(generateContent|streamGenerateContent|countTokens)$")

_HANDLED = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"})
_GENERATION = {"temperature": "temperature", "topP": "top_p", "topK": "top_k", "seed": "seed",
               "presencePenalty": "presence_penalty", "frequencyPenalty": "frequency_penalty"}
_GENERATION_HANDLED = frozenset({*_GENERATION, "maxOutputTokens", "stopSequences", "candidateCount",
                                 "responseMimeType", "responseSchema", "responseJsonSchema"})
_MODES = {"AUTO": "auto", "ANY": "required", "NONE": "none", "MODE_UNSPECIFIED": "auto", "VALIDATED": "auto"}
_SCHEMA_DROPPED = frozenset({"propertyOrdering"})


def route(path: str) -> tuple[str, str] | None:
    """(model name as the client wrote it, method) for a Gemini path, else None."""
    match = ROUTE.match(path)
    if match is None:
        return None
    return match.group(1).split("/", 1)[1], match.group(2)


def request_to_chat(body: dict) -> tuple[dict, dict]:
    """Client request -> (chat-completions body for vLLM, {what was dropped: value}). The body's `model` (set by
    the handler from the URL) names the model; Gemini clients send none in the body."""
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise TranslationError("`contents` is required and must be a list of Content objects", "contents")
    dropped: dict = {key: value for key, value in body.items() if key not in _HANDLED}
    builder = ChatMessages()
    _system(body.get("systemInstruction"), builder, dropped)
    _Conversation(builder, dropped).add_all(contents)
    chat: dict = {"model": body.get("model"), "messages": builder.result()}
    if chat["messages"] and chat["messages"][-1]["role"] == "assistant":
        chat["add_generation_prompt"] = False  # a trailing model turn is a prefill, as in Anthropic's Messages
        chat["continue_final_message"] = True
    _tools(body, chat, dropped)
    _generation(body.get("generationConfig"), chat, dropped)
    return chat, dropped


def open_stream(*, client_model: str | None, request: dict) -> StreamTranslator:
    return StreamTranslator(client_model=client_model, request=request)


def count_tokens_request(body: dict, model: str | None) -> dict:
    """A `countTokens` body ({contents} or {generateContentRequest}) -> the body for vLLM's `/tokenize` (the same
    prompt rendering a generateContent call of it would get)."""
    inner = body.get("generateContentRequest")
    if isinstance(inner, dict):
        body = inner
    chat, _ = request_to_chat({**body, "model": model})
    out = {"model": model, "messages": chat["messages"],
           "add_generation_prompt": chat.get("add_generation_prompt", True)}
    if chat.get("continue_final_message"):
        out["continue_final_message"] = True
    if "tools" in chat:
        out["tools"] = chat["tools"]
    return out


def _system(system: Any, builder: ChatMessages, dropped: dict) -> None:
    if system is None:
        return
    if isinstance(system, str):
        builder.system(system)
        return
    if not isinstance(system, dict) or not isinstance(system.get("parts"), list):
        raise TranslationError("`systemInstruction` must be a Content object with `parts`", "systemInstruction")
    texts, calls, responses = _parts(system["parts"], "systemInstruction.parts", dropped)
    if calls or responses:
        raise TranslationError("`systemInstruction` may hold text parts only", "systemInstruction.parts")
    builder.system("\n".join(texts))


def _parts(parts: list, where: str, dropped: dict) -> tuple[list[str], list[tuple[int, dict]], list[tuple[int, dict]]]:
    """(texts, [(part index, functionCall)], [(part index, functionResponse)]) of one Content's parts."""
    texts, calls, responses = [], [], []
    for j, part in enumerate(parts):
        at = f"{where}.{j}"
        if not isinstance(part, dict):
            raise TranslationError("each part must be an object", at)
        if "thoughtSignature" in part:
            _note(dropped, "thought_signatures", at, len(str(part["thoughtSignature"])))
        if part.get("thought"):  # noted as Anthropic's thinking blocks are: exact continuation counts it as such
            _note(dropped, "blocks", at, {"type": "thinking", "chars": len(part.get("text") or "")})
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part.get("functionCall"), dict):
            calls.append((j, part["functionCall"]))
        elif isinstance(part.get("functionResponse"), dict):
            responses.append((j, part["functionResponse"]))
        else:
            kinds = sorted(k for k in part if k not in ("thoughtSignature", "thought"))
            _note(dropped, "parts", at, {"kinds": kinds})
    return texts, calls, responses


class _Conversation:
    """Contents -> chat messages, pairing function responses with the calls they answer (module doc)."""

    def __init__(self, builder: ChatMessages, dropped: dict):
        self.builder, self.dropped = builder, dropped
        self.open: list[tuple[str, str]] = []  # (id, name) of calls not answered yet, in order

    def add_all(self, contents: list) -> None:
        for i, content in enumerate(contents):
            where = f"contents.{i}"
            if not isinstance(content, dict):
                raise TranslationError("each Content must be an object", where)
            parts = content.get("parts")
            if not isinstance(parts, list):
                raise TranslationError("a Content needs a list of `parts`", f"{where}.parts")
            role = content.get("role") or "user"
            texts, calls, responses = _parts(parts, f"{where}.parts", self.dropped)
            if role == "model":
                if responses:
                    raise TranslationError("a model Content cannot hold functionResponse parts", f"{where}.parts")
                self._model(i, texts, calls, where)
            elif role in ("user", "function"):
                if calls:
                    raise TranslationError("a user Content cannot hold functionCall parts", f"{where}.parts")
                self._user(i, texts, responses, where)
            else:
                raise TranslationError(f"unknown role {role!r} (expected user or model)", f"{where}.role")

    def _model(self, i: int, texts: list[str], calls: list[tuple[int, dict]], where: str) -> None:
        tool_calls = []
        for n, (j, call) in enumerate(calls):
            name = call.get("name")
            if not isinstance(name, str) or not name:
                raise TranslationError("a functionCall needs a string `name`", f"{where}.parts.{j}.functionCall")
            args = call.get("args")
            if args is not None and not isinstance(args, dict):
                raise TranslationError("`functionCall.args` must be an object", f"{where}.parts.{j}.functionCall.args")
            given = call.get("id")
            cid = given if isinstance(given, str) and given else call_id(i, n)
            tool_calls.append({"id": cid, "type": "function",
                               "function": {"name": name, "arguments": json.dumps(args or {}, ensure_ascii=False)}})
            self.open.append((cid, name))
        message: dict = {"role": "assistant", "content": "\n".join(texts) if texts or not tool_calls else None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        self.builder.add(message)

    def _user(self, i: int, texts: list[str], responses: list[tuple[int, dict]], where: str) -> None:
        for n, (j, response) in enumerate(responses):  # tool messages first: they must follow the calls
            at = f"{where}.parts.{j}.functionResponse"
            name = response.get("name")
            if not isinstance(name, str):
                raise TranslationError("a functionResponse needs a string `name`", at)
            self.builder.add({"role": "tool", "tool_call_id": self._answering(response.get("id"), name, i, n),
                              "content": _response_text(response.get("response"), at)})
        if texts:
            self.builder.add({"role": "user", "content": "\n".join(texts)})

    def _answering(self, given: Any, name: str, i: int, n: int) -> str:
        """The id of the open call a response answers (module doc)."""
        for k, (cid, _) in enumerate(self.open):
            if cid == given:
                return self.open.pop(k)[0]
        for k, (cid, open_name) in enumerate(self.open):
            if open_name == name:
                return self.open.pop(k)[0]
        return given if isinstance(given, str) and given else call_id(i, n)


def _response_text(response: Any, at: str) -> str:
    if response is None:
        return ""
    if not isinstance(response, dict):
        raise TranslationError("`functionResponse.response` must be an object", f"{at}.response")
    if len(response) == 1 and isinstance(response.get("output"), str):
        return response["output"]
    return json.dumps(response, ensure_ascii=False)


def json_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-subset Schema -> JSON Schema: lowercase `type`, `nullable: true` -> a "null" type,
    `propertyOrdering` dropped, nested schemas (properties, items, anyOf) normalised the same way."""
    if not isinstance(schema, dict):
        return schema
    out: dict = {}
    for key, value in schema.items():
        if key in _SCHEMA_DROPPED or key == "nullable":
            continue
        if key == "type" and isinstance(value, str):
            out["type"] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = json_schema(value)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [json_schema(sub) for sub in value]
        elif key == "example":
            out["examples"] = [value]
        else:
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if out.get("type") == "type_unspecified":
        del out["type"]
    return out


def _tools(body: dict, chat: dict, dropped: dict) -> None:
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise TranslationError("`tools` must be a list", "tools")
    declarations: list[tuple[str, Any]] = []
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, dict):
            raise TranslationError("each tool must be an object", f"tools.{i}")
        for key, value in tool.items():
            if key == "functionDeclarations" and isinstance(value, list):
                declarations += [(f"tools.{i}.functionDeclarations.{j}", d) for j, d in enumerate(value)]
            else:  # googleSearch, codeExecution, urlContext, retrieval...: Google-hosted tools
                _note(dropped, "tools", f"tools.{i}.{key}", value)

    def function_of(_: int, item: tuple[str, Any]) -> dict:
        where, declaration = item
        if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
            raise TranslationError("each function declaration needs a string `name`", where)
        function: dict = {"name": declaration["name"]}
        if declaration.get("description") is not None:
            function["description"] = declaration["description"]
        if declaration.get("parametersJsonSchema") is not None:
            function["parameters"] = declaration["parametersJsonSchema"]
        elif declaration.get("parameters") is not None:
            function["parameters"] = json_schema(declaration["parameters"])
        else:
            function["parameters"] = {"type": "object", "properties": {}}
        for key in declaration.keys() - {"name", "description", "parameters", "parametersJsonSchema"}:
            _note(dropped, "tool_fields", f"{where}.{key}", declaration[key])
        return function

    convert_tools({"tools": declarations} if declarations else {}, chat, function_of)
    _tool_config(body.get("toolConfig"), chat, dropped)


def _tool_config(config: Any, chat: dict, dropped: dict) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise TranslationError("`toolConfig` must be an object", "toolConfig")
    for key in config.keys() - {"functionCallingConfig"}:
        _note(dropped, "tool_config", key, config[key])
    calling = config.get("functionCallingConfig")
    if calling is None:
        return
    mode = calling.get("mode", "AUTO") if isinstance(calling, dict) else None
    if mode not in _MODES:
        raise TranslationError("`mode` must be AUTO, ANY, NONE or VALIDATED", "toolConfig.functionCallingConfig.mode")
    if mode == "VALIDATED":
        _note(dropped, "tool_config", "functionCallingConfig.mode", mode)
    mapped: str | dict = _MODES[mode]
    allowed = calling.get("allowedFunctionNames")
    if allowed is not None:
        if mode == "ANY" and isinstance(allowed, list) and len(allowed) == 1 and isinstance(allowed[0], str):
            mapped = {"type": "function", "function": {"name": allowed[0]}}
        else:  # chat's tool_choice names one function or none: a list cannot be expressed
            _note(dropped, "tool_config", "functionCallingConfig.allowedFunctionNames", allowed)
    apply_tool_choice(chat, mapped, "function")


def _generation(config: Any, chat: dict, dropped: dict) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise TranslationError("`generationConfig` must be an object", "generationConfig")
    for key in config.keys() - _GENERATION_HANDLED:
        if key == "thinkingConfig":  # as Anthropic's `thinking`: another setting keys another chain (normalise.py)
            dropped["thinking"] = config[key]
        else:
            _note(dropped, "generation_config", key, config[key])
    where = "generationConfig"
    limit = config.get("maxOutputTokens")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise TranslationError("`maxOutputTokens` must be a positive integer", f"{where}.maxOutputTokens")
        chat["max_tokens"] = limit
    for key, chat_key in _GENERATION.items():
        value = config.get(key)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TranslationError(f"`{key}` must be a number", f"{where}.{key}")
            chat[chat_key] = value
    stop = config.get("stopSequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise TranslationError("`stopSequences` must be a list of strings", f"{where}.stopSequences")
        if stop:
            chat["stop"] = stop
    count = config.get("candidateCount")
    if count not in (None, 1):
        raise TranslationError("only `candidateCount` 1 is supported: each call is one recorded completion",
                               f"{where}.candidateCount")
    _response_format(config, chat, dropped)


def _response_format(config: dict, chat: dict, dropped: dict) -> None:
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema")
    if schema is None and config.get("responseSchema") is not None:
        schema = json_schema(config["responseSchema"])
    if mime in (None, "text/plain") and schema is None:
        return
    if mime not in (None, "application/json"):
        _note(dropped, "generation_config", "responseMimeType", mime)  # text/x.enum: no chat equivalent
        return
    if schema is None:
        chat["response_format"] = {"type": "json_object"}
    else:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
