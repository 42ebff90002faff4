// What the Vercel AI SDK's Anthropic, Google and OpenAI providers send for the dealer's MCP tools.
// Run by tests/test_mcp_converters.py: `node ai_sdk_tools.mjs MCP_URL` (the live tools/list, JSON-RPC
// over fetch on loopback) or `node ai_sdk_tools.mjs --file TOOLS.json` (a tools/list result the test
// fetched, e.g. through a platform's Host routing). Each provider builds its real request with a
// fetch that records the body and fails, so no model is called and nothing leaves the machine.
// Prints {"tools": [...], "providers": {name: {"body": ...} | {"error": "..."}}} as JSON.
import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, tool } from "ai";
import { readFileSync } from "node:fs";

const [first, second] = process.argv.slice(2);
const headers = {
  "Content-Type": "application/json",
  Accept: "application/json, text/event-stream",
  "MCP-Protocol-Version": "2025-11-25",
};
const listed =
  first === "--file"
    ? JSON.parse(readFileSync(second, "utf8"))
    : (
        await fetch(first, {
          method: "POST",
          headers,
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        }).then((r) => r.json())
      ).result;
const tools = listed.tools;

class Captured extends Error {}

async function requestOf(make, providerOptions) {
  let body = null;
  const capture = async (_url, init) => {
    body = JSON.parse(init.body);
    throw new Captured("captured");
  };
  const model = make(capture);
  const aiTools = Object.fromEntries(
    tools.map((t) => [t.name, tool({ description: t.description, inputSchema: jsonSchema(t.inputSchema) })]),
  );
  try {
    await generateText({ model, tools: aiTools, prompt: "Find a used SUV.", maxRetries: 0, providerOptions });
  } catch (error) {
    if (body === null) return { error: String(error && error.message ? error.message : error) };
  }
  return { body };
}

const providers = {
  anthropic: await requestOf((fetch) => createAnthropic({ apiKey: "test", fetch })("claude-sonnet-4-5")),
  google: await requestOf((fetch) => createGoogleGenerativeAI({ apiKey: "test", fetch })("gemini-2.5-flash")),
  openai: await requestOf((fetch) => createOpenAI({ apiKey: "test", fetch })("gpt-4.1")),
};
process.stdout.write(JSON.stringify({ tools, providers }));
