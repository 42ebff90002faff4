// The official TypeScript MCP client (@modelcontextprotocol/sdk 1.x, pinned in package-lock.json)
// against an aap dealer. Run by tests/test_mcp_node.py: one process runs every case of a plan.
//
//   node mcp_client.mjs plan.json   → one JSON report on stdout
//
// plan = {
//   url,                                   the dealer's /mcp URL
//   calls: [{id, tool, arguments, token?}], tools/call through Client.callTool() (token: Bearer)
//   verdicts: {tool: [instance, ...]},     each judged by the SDK's own Ajv validator against
//                                          that tool's published outputSchema
//   schemaVerdicts: {id: {schema, instances}}  the same for a given schema
// }
// report = {protocolVersion, tools: [{name, outputSchema}], calls: {id: outcome}, verdicts, schemaVerdicts}
// where outcome = {isError, structuredContent} or {threw: {name, code, message}}.
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));

async function connect(token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(plan.url), { requestInit: { headers } });
  const client = new Client({ name: "aap-node-tests", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const clients = new Map();
async function clientFor(token) {
  const key = token ?? "";
  if (!clients.has(key)) clients.set(key, await connect(token));
  return clients.get(key);
}

const anonymous = await clientFor(null);
const listed = await anonymous.listTools();
const report = {
  protocolVersion: anonymous.transport?.protocolVersion ?? null,
  tools: listed.tools.map((t) => ({ name: t.name, outputSchema: t.outputSchema ?? null })),
  calls: {},
  verdicts: {},
  schemaVerdicts: {},
};

for (const call of plan.calls ?? []) {
  const client = await clientFor(call.token ?? null);
  try {
    const result = await client.callTool({ name: call.tool, arguments: call.arguments });
    report.calls[call.id] = { isError: result.isError ?? false, structuredContent: result.structuredContent ?? null };
  } catch (error) {
    report.calls[call.id] = { threw: { name: error?.name, code: error?.code ?? null, message: String(error?.message) } };
  }
}

const ajv = new AjvJsonSchemaValidator();
for (const [name, instances] of Object.entries(plan.verdicts ?? {})) {
  const tool = listed.tools.find((t) => t.name === name);
  const validate = ajv.getValidator(tool.outputSchema);
  report.verdicts[name] = instances.map((instance) => validate(instance).valid);
}

for (const [id, { schema, instances }] of Object.entries(plan.schemaVerdicts ?? {})) {
  const validate = ajv.getValidator(schema);
  report.schemaVerdicts[id] = instances.map((instance) => validate(instance).valid);
}

for (const client of clients.values()) await client.close();
process.stdout.write(JSON.stringify(report));
