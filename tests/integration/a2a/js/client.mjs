// The @a2a-js/sdk client as a stranger would use it: card from the well-known URL, JSON-RPC transport,
// bearer token through a wrapped fetch. Prints one JSON line per stream event.
//   node client.mjs BASE_URL TOKEN send TEXT [DROP_AFTER]   (SendStreamingMessage, no metadata)
//   node client.mjs BASE_URL TOKEN resubscribe TASK_ID      (SubscribeToTask)
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';
import { SendMessageRequest, StreamResponse, SubscribeToTaskRequest } from '@a2a-js/sdk';

const [base, token, mode, arg, dropAfter] = process.argv.slice(2);
const authed = (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set('Authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authed })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: authed }),
  }),
);
const client = await factory.createFromUrl(base);
const stream =
  mode === 'send'
    ? client.sendMessageStream(
        SendMessageRequest.fromJSON({
          message: { messageId: `js-${Date.now()}`, role: 'ROLE_USER', parts: [{ text: arg }] },
        }),
      )
    : client.resubscribeTask(SubscribeToTaskRequest.fromJSON({ id: arg }));
let seen = 0;
for await (const event of stream) {
  process.stdout.write(JSON.stringify(StreamResponse.toJSON(event)) + '\n');
  seen += 1;
  if (dropAfter && seen >= Number(dropAfter)) break; // the connection drops here
}
process.exit(0);
