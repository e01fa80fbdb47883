"""Whether an LLM server's tokens are the ones it gave alone (bench/llm_servers.py).

Greedy decoding over bf16 logits is not bit-for-bit repeatable between runs of one server: other
kernels or another reduction order round the logits a little differently, and where the two
highest logits are that close the other one can win. From there on the two runs continue from
different text and cannot be compared. So each token is compared up to the first where the runs
part, and a parting is explained only if it is at a near tie in both runs; before it, each step's
highest logit must agree within the rounding. Memory lost or damaged shows as a parting between
logits far apart, or as highest logits that no longer agree. A run that gave no logits (an engine
that does not say them) is held to every token.
"""

from __future__ import annotations

# How far the logits of two runs of one server may lie apart from rounding alone (bf16 keeps 8
# bits: a logit of 4 to 8 is rounded to 1/32, and 28 layers add a few such steps).
LOGIT_ROUNDING = 0.25


def parting(tokens: list[int], reference: list[int]) -> int:
    """The first token where the two differ; the shorter one's length where one starts the
    other."""
    compared = min(len(tokens), len(reference))
    return next((i for i in range(compared) if tokens[i] != reference[i]), compared)


def request_difference(made: dict, wanted: dict) -> str | None:
    """Why request `made` is not request `wanted` of the run alone, or None: both dicts have
    `tokens` and may have `top_logits` (each token's two highest logits)."""
    tokens, reference = made["tokens"], wanted["tokens"]
    tops, reference_tops = made.get("top_logits"), wanted.get("top_logits")
    compared, at = min(len(tokens), len(reference)), parting(tokens, reference)
    if tops is not None and reference_tops is not None:
        drift = max((abs(tops[i][0] - reference_tops[i][0]) for i in range(at)), default=0.0)
        if drift > LOGIT_ROUNDING:
            return f"highest logits {drift:.3f} apart before token {at}"
        if at < compared:
            gaps = (tops[at][0] - tops[at][1], reference_tops[at][0] - reference_tops[at][1])
            if max(gaps) <= 2 * LOGIT_ROUNDING:
                return None  # a near tie: rounding chose; nothing after it compares
            return (f"from token {at} of {len(reference)}, its two highest logits "
                    f"{gaps[0]:.3f} apart here and {gaps[1]:.3f} alone")
    if tokens == reference:
        return None
    return f"from token {at} of {len(reference)}"


def token_differences(servers: list[dict], alone: list[dict]) -> list[str]:
    """Where the servers' requests part from the servers alone beyond rounding (above), and each
    request or server missing."""
    if len(servers) != len(alone):
        return [f"{len(servers)} servers answered, {len(alone)} alone"]
    found = []
    for number, (run, reference) in enumerate(zip(servers, alone)):
        if len(run["requests"]) != len(reference["requests"]):
            found.append(f"server {number}: {len(run['requests'])} requests served, "
                         f"{len(reference['requests'])} alone")
        for request, same in zip(run["requests"], reference["requests"]):
            why = request_difference(request, same)
            if why is not None:
                found.append(f"server {number} request {request.get('index', '?')}: {why}")
    return found


def compared_tokens(servers: list[dict], alone: list[dict]) -> tuple[int, int]:
    """(tokens compared, tokens in all): how much of the output the check could hold to alone,
    each request up to where it parted at a near tie."""
    compared = total = 0
    for run, reference in zip(servers, alone):
        for request, same in zip(run["requests"], reference["requests"]):
            total += len(same["tokens"])
            compared += parting(request["tokens"], same["tokens"])
    return compared, total
