# merit's MCP tools driven by the official MCP Python SDK (PyPI `mcp`), as an agent would:
# list the tools, ask a question whose SQL fails and is repaired, confirm the answer, find the
# new memory by search, retire and restore it, and check that a refusal reads as a tool error.
#
#   python3 mcp_client.py http  <url> <key> <other-tenant-key>
#   python3 mcp_client.py stdio <merit binary> <args...>      (the key in $MERIT_API_KEY)
#
# Prints one JSON line of what it saw; exits non-zero with a message when something is off.
import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

EXPECTED_TOOLS = {
    "list_databases", "ask", "give_feedback", "search_memory", "list_memories",
    "get_memory", "retire_memory", "restore_memory", "memory_stats",
}


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


async def call(session, name, arguments=None):
    result = await session.call_tool(name, arguments or {})
    if result.is_error:
        fail(f"{name} failed: {result.content}")
    if result.structured_content is None:
        fail(f"{name} gave no structured content: {result.content}")
    # The text content carries the same JSON.
    if json.loads(result.content[0].text) != result.structured_content:
        fail(f"{name}: text and structured content differ")
    return result.structured_content


async def refusal(session, name, arguments):
    result = await session.call_tool(name, arguments)
    if not result.is_error:
        fail(f"{name} {arguments} should have been refused: {result.structured_content}")
    return result.content[0].text


async def exercise(session):
    await session.initialize()
    tools = {tool.name for tool in (await session.list_tools()).tools}
    if tools != EXPECTED_TOOLS:
        fail(f"tools differ: {sorted(tools ^ EXPECTED_TOOLS)}")
    databases = (await call(session, "list_databases"))["databases"]
    answer = await call(session, "ask", {
        "database": "concert_singer",
        "question": "What are the names of the singers?",
        "sql": "SELECT nme FROM singer",
    })
    if not answer["executed"] or len(answer["attempts"]) < 2:
        fail(f"the failing SQL was not repaired: {answer}")
    done = await call(session, "give_feedback", {
        "database": "concert_singer", "episode": answer["episode"], "kind": "confirm",
    })
    memory = done["memory"]
    found = (await call(session, "search_memory", {
        "database": "concert_singer", "query": "singer names nme",
    }))["memories"]
    if not found or found[0]["id"] != memory or found[0]["score"] <= 0:
        fail(f"search did not find memory {memory}: {found}")
    retired = await call(session, "retire_memory", {
        "database": "concert_singer", "id": memory, "reason": "checked by hand",
    })
    listed = (await call(session, "list_memories", {
        "database": "concert_singer", "retired": True,
    }))["memories"]
    restored = await call(session, "restore_memory", {"database": "concert_singer", "id": memory})
    one = await call(session, "get_memory", {"database": "concert_singer", "id": memory})
    stats = await call(session, "memory_stats", {"database": "concert_singer"})
    again = await refusal(session, "give_feedback", {
        "database": "concert_singer", "episode": answer["episode"], "kind": "reject",
    })
    outside = await refusal(session, "ask", {"database": "pets_1", "question": "How many pets?"})
    unknown_kind = await refusal(session, "give_feedback", {
        "database": "concert_singer", "episode": answer["episode"], "kind": "maybe",
    })
    if "unknown feedback kind" not in unknown_kind:
        fail(f"an unknown feedback kind should be named: {unknown_kind}")
    return {
        "databases": databases,
        "repaired_sql": answer["sql"],
        "memory": memory,
        "polarity": done["polarity"],
        "retired": retired["retired"],
        "listed_retired": [m["id"] for m in listed],
        "restored": not restored["retired"] and not one["retired"],
        "asked": stats["asked"],
        "second_feedback": again,
        "outside_scope": outside,
    }


async def over_http(url, key, other_key):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                seen = await exercise(session)
    # Another tenant's key sees none of that memory.
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {other_key}"}) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                seen["other_tenant_memories"] = (await call(session, "list_memories", {
                    "database": "concert_singer",
                }))["memories"]
    return seen


async def over_stdio(command, args):
    # The SDK passes only a safe subset of the environment by default; merit needs its key and
    # cache settings.
    server = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            return await exercise(session)


def main():
    mode = sys.argv[1]
    if mode == "http":
        seen = asyncio.run(over_http(sys.argv[2], sys.argv[3], sys.argv[4]))
    elif mode == "stdio":
        seen = asyncio.run(over_stdio(sys.argv[2], sys.argv[3:]))
    else:
        fail(f"unknown mode {mode}")
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
