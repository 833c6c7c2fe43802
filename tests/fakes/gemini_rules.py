"""The request rules a strict Gemini ``generateContent`` server enforces, as a pure function.

A fake Gemini server answers 400 with these messages; the adapter tests run every body they build
through it. The rules are the ones the real API applies (or is documented to apply) and that a
translator can get wrong: roles, call/response pairing, Gemini 3 thought signatures on the current
turn, object-typed ``args``/``response``, unknown fields (the real server rejects
``Unknown name "..."``), and no artifacts of the OpenAI-shaped transcript leaking through.
"""

from __future__ import annotations

import re
from typing import Any

_TOP_LEVEL = {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings",
              "cachedContent", "labels"}
_CONTENT = {"role", "parts"}
_PART = {"text", "thought", "thoughtSignature", "inlineData", "fileData", "functionCall", "functionResponse",
         "executableCode", "codeExecutionResult", "videoMetadata", "partMetadata", "mediaResolution", "toolCall",
         "toolResponse"}
_PART_DATA = ("text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
              "codeExecutionResult", "toolCall", "toolResponse")
# A ``tools`` entry: one kind of tool each (function declarations, or one built-in tool).
_TOOL = {"functionDeclarations", "googleSearch", "google_search", "googleSearchRetrieval", "codeExecution",
         "urlContext", "fileSearch", "googleMaps"}
_TOOL_CONFIG = {"functionCallingConfig", "retrievalConfig", "includeServerSideToolInvocations"}
_MAJOR = re.compile(r"gemini-(\d+)")
_FUNCTION_CALL = {"id", "name", "args"}
_FUNCTION_RESPONSE = {"id", "name", "response", "parts", "willContinue", "scheduling"}
_GENERATION = {"maxOutputTokens", "temperature", "topP", "topK", "candidateCount", "stopSequences", "seed",
               "presencePenalty", "frequencyPenalty", "responseMimeType", "responseSchema",
               "responseJsonSchema", "responseModalities", "responseLogprobs", "logprobs", "thinkingConfig",
               "mediaResolution", "speechConfig", "enableEnhancedCivicAnswers"}
_THINKING = {"thinkingLevel", "thinkingBudget", "includeThoughts"}
_MODES = {"AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"}
_FOREIGN = {"reasoning_content", "thinking_blocks", "extra_content", "tool_calls", "tool_call_id"}
# Values that are free-form JSON (Struct / JSON Schema): their keys are user data, not fields.
_OPAQUE = {"args", "response", "parametersJsonSchema", "responseJsonSchema", "parameters", "responseSchema",
           "response_json_schema"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$")


def _foreign_keys(value: Any, path: str, problems: list[str]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in _FOREIGN:
                problems.append(f"{path}.{key}: unknown field (OpenAI transcript artifact)")
            if key not in _OPAQUE:
                _foreign_keys(sub, f"{path}.{key}", problems)
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            _foreign_keys(sub, f"{path}[{index}]", problems)


def _unknown(obj: dict[str, Any], allowed: set[str], path: str, problems: list[str]) -> None:
    for key in obj:
        if key not in allowed:
            problems.append(f'{path}: Unknown name "{key}"')


def _calls(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or () if isinstance(p, dict) and "functionCall" in p]


def _responses(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or () if isinstance(p, dict) and "functionResponse" in p]


def _check_part(part: Any, path: str, problems: list[str]) -> None:
    if not isinstance(part, dict):
        problems.append(f"{path}: a part must be an object")
        return
    _unknown(part, _PART, path, problems)
    data = [key for key in _PART_DATA if key in part]
    if len(data) != 1 and not (not data and "thoughtSignature" in part):
        problems.append(f"{path}: a part must hold exactly one data field, got {data}")
    if "text" in part and not isinstance(part["text"], str):
        problems.append(f"{path}.text: must be a string")
    call = part.get("functionCall")
    if call is not None:
        if not isinstance(call, dict) or not call.get("name"):
            problems.append(f"{path}.functionCall: name is required")
        else:
            _unknown(call, _FUNCTION_CALL, f"{path}.functionCall", problems)
            if "args" in call and not isinstance(call["args"], dict):
                problems.append(f"{path}.functionCall.args: must be an object")
    response = part.get("functionResponse")
    if response is not None:
        if not isinstance(response, dict) or not response.get("name"):
            problems.append(f"{path}.functionResponse: name is required")
        else:
            _unknown(response, _FUNCTION_RESPONSE, f"{path}.functionResponse", problems)
            if not isinstance(response.get("response"), dict):
                problems.append(f"{path}.functionResponse.response: must be an object")


def _check_pairing(contents: list[Any], problems: list[str]) -> None:
    for index, content in enumerate(contents):
        if not isinstance(content, dict):
            continue
        calls = _calls(content)
        responses = _responses(content)
        if responses:
            previous = contents[index - 1] if index else None
            if content.get("role") != "user":
                problems.append(f"contents[{index}]: function responses must be in a user content")
            if not isinstance(previous, dict) or previous.get("role") != "model" or not _calls(previous):
                problems.append(f"contents[{index}]: function responses do not follow a function call turn")
        if not calls:
            continue
        if content.get("role") != "model":
            problems.append(f"contents[{index}]: function calls must be in a model content")
        following = contents[index + 1] if index + 1 < len(contents) else None
        answers = _responses(following) if isinstance(following, dict) else []
        if not isinstance(following, dict) or following.get("role") != "user" or len(answers) != len(calls):
            problems.append(f"contents[{index}]: Please ensure that the number of function response parts is "
                            "equal to the number of function call parts of the function call turn.")
            continue
        for position, (call, answer) in enumerate(zip(calls, answers, strict=True)):
            call_fields, answer_fields = call["functionCall"], answer["functionResponse"]
            if not isinstance(call_fields, dict) or not isinstance(answer_fields, dict):
                continue
            if call_fields.get("name") != answer_fields.get("name"):
                problems.append(f"contents[{index + 1}].parts: response {position} is named "
                                f"{answer_fields.get('name')!r} but answers {call_fields.get('name')!r}")
            if call_fields.get("id") and answer_fields.get("id") and call_fields["id"] != answer_fields["id"]:
                problems.append(f"contents[{index + 1}].parts: response {position} id does not match its call")


def _check_signatures(contents: list[Any], problems: list[str]) -> None:
    """Gemini 3 validates the current turn: everything after the last plain user input."""
    start = 0
    for index, content in enumerate(contents):
        if isinstance(content, dict) and content.get("role") == "user" and not _responses(content):
            start = index + 1
    for index in range(start, len(contents)):
        content = contents[index]
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        calls = _calls(content)
        if calls and not calls[0].get("thoughtSignature"):
            name = calls[0]["functionCall"].get("name") if isinstance(calls[0]["functionCall"], dict) else "?"
            problems.append(f"contents[{index}]: Function call is missing a thought_signature in functionCall "
                            f"parts. Additional data, function call `default_api:{name}` , position {index + 1}.")


def _check_config(body: dict[str, Any], problems: list[str]) -> None:
    generation = body.get("generationConfig")
    if isinstance(generation, dict):
        _unknown(generation, _GENERATION, "generationConfig", problems)
        thinking = generation.get("thinkingConfig")
        if isinstance(thinking, dict):
            _unknown(thinking, _THINKING, "generationConfig.thinkingConfig", problems)
            if "thinkingLevel" in thinking and "thinkingBudget" in thinking:
                problems.append("generationConfig.thinkingConfig: thinkingLevel and thinkingBudget are exclusive")
        if "responseJsonSchema" in generation and generation.get("responseMimeType") != "application/json":
            problems.append("generationConfig.responseJsonSchema requires responseMimeType application/json")
    tool_config = body.get("toolConfig")
    if isinstance(tool_config, dict):
        _unknown(tool_config, _TOOL_CONFIG, "toolConfig", problems)
        calling = tool_config.get("functionCallingConfig")
        if calling is not None and calling.get("mode") not in _MODES:
            problems.append(f"toolConfig.functionCallingConfig.mode: invalid value {calling.get('mode')!r}")
        if (calling or {}).get("allowedFunctionNames") and calling.get("mode") != "ANY":
            problems.append("toolConfig.functionCallingConfig.allowedFunctionNames requires mode ANY")
    for t_index, tool in enumerate(body.get("tools") or ()):
        _unknown(tool or {}, _TOOL, f"tools[{t_index}]", problems)
        if len(tool or {}) != 1:
            problems.append(f"tools[{t_index}]: one kind of tool per entry")
        for d_index, declaration in enumerate((tool or {}).get("functionDeclarations") or ()):
            path = f"tools[{t_index}].functionDeclarations[{d_index}]"
            if not _NAME.match(str(declaration.get("name") or "")):
                problems.append(f"{path}.name: invalid function name {declaration.get('name')!r}")
            if "parameters" in declaration and "parametersJsonSchema" in declaration:
                problems.append(f"{path}: parameters and parametersJsonSchema are exclusive")
            if "strict" in declaration:
                problems.append(f'{path}: Unknown name "strict"')
            if "$schema" in (declaration.get("parametersJsonSchema") or {}):
                problems.append(f"{path}.parametersJsonSchema: $schema is not supported")


def _check_combination(body: dict[str, Any], model: str, problems: list[str]) -> None:
    """Built-in tools beside function declarations: Gemini 3 and later only, with the server-side tool
    invocations included (tool combination); earlier models refuse the pair."""
    kinds = {key for tool in body.get("tools") or () if isinstance(tool, dict) for key in tool}
    if "functionDeclarations" not in kinds or not kinds - {"functionDeclarations"}:
        return
    major = _MAJOR.search(model)
    if major is None or int(major.group(1)) < 3:
        problems.append("Tool use with function calling is unsupported")
    elif not (body.get("toolConfig") or {}).get("includeServerSideToolInvocations"):
        problems.append("built-in tools with function declarations need toolConfig.includeServerSideToolInvocations")


def gemini_request_problems(body: dict[str, Any], model: str) -> list[str]:
    """Every reason a strict Gemini server would reject ``body`` for ``model``; empty when it is valid."""
    problems: list[str] = []
    if not isinstance(body, dict):
        return ["request body must be a JSON object"]
    _check_combination(body, model, problems)
    _unknown(body, _TOP_LEVEL, "request", problems)
    _foreign_keys(body, "request", problems)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return [*problems, "contents: at least one content is required"]
    for index, content in enumerate(contents):
        path = f"contents[{index}]"
        if not isinstance(content, dict):
            problems.append(f"{path}: must be an object")
            continue
        _unknown(content, _CONTENT, path, problems)
        if content.get("role") not in ("user", "model"):
            problems.append(f"{path}.role: Please use a valid role: user, model (got {content.get('role')!r})")
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            problems.append(f"{path}: must include at least one parts field")
            continue
        for p_index, part in enumerate(parts):
            _check_part(part, f"{path}.parts[{p_index}]", problems)
    system = body.get("systemInstruction")
    if system is not None:
        if not isinstance(system, dict) or not isinstance(system.get("parts"), list):
            problems.append("systemInstruction: must hold parts")
        else:
            for p_index, part in enumerate(system["parts"]):
                _check_part(part, f"systemInstruction.parts[{p_index}]", problems)
    _check_pairing(contents, problems)
    if "gemini-3" in model:
        _check_signatures(contents, problems)
    _check_config(body, problems)
    return problems
