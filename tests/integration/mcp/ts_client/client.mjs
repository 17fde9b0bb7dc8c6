// A generic MCP host, written only against the TypeScript SDK's public client API, for the suite.
// Commands arrive as JSON lines on stdin; every event and answer leaves as one JSON line on stdout.
// Env: MCP_URL, MCP_TOKEN.
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const out = (obj) => process.stdout.write(JSON.stringify({ t: Date.now(), ...obj }) + "\n");

// Report when the standalone GET stream is open: the server can only reach a session through it.
const watchingFetch = async (input, init) => {
  const response = await fetch(input, init);
  if ((init?.method ?? "GET") === "GET" && response.status === 200) out({ event: "stream_open" });
  return response;
};

const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
  fetch: watchingFetch,
});
const client = new Client({ name: "switchboard-suite-ts", version: "1.0.0" }, { capabilities: {} });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (note) => {
  out({ event: "updated", uri: note.params.uri });
});
await client.connect(transport);
out({ event: "ready", capabilities: client.getServerCapabilities() ?? null });

const ops = {
  list: async () => ({ uris: (await client.listResources()).resources.map((r) => r.uri) }),
  templates: async () => ({ templates: (await client.listResourceTemplates()).resourceTemplates }),
  read: async ({ uri }) => ({ contents: (await client.readResource({ uri })).contents }),
  subscribe: async ({ uri }) => (await client.subscribeResource({ uri }), {}),
  unsubscribe: async ({ uri }) => (await client.unsubscribeResource({ uri }), {}),
  tools: async () => ({ tools: (await client.listTools()).tools }),
  // callTool validates structuredContent against the tool's outputSchema (after tools/list).
  call: async ({ name, args }) => ({ result: await client.callTool({ name, arguments: args ?? {} }) }),
};

for await (const line of createInterface({ input: process.stdin })) {
  const cmd = JSON.parse(line);
  if (cmd.op === "exit") break;
  try {
    out({ event: "answer", op: cmd.op, ...(await ops[cmd.op](cmd)) });
  } catch (err) {
    out({ event: "answer", op: cmd.op, error: { code: err.code ?? null, message: String(err.message) } });
  }
}
await client.close();
process.exit(0);
