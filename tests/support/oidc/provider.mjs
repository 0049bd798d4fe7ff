// An OpenID Connect provider for the dashboard's log-in test (node_modules: `npm ci --prefix tests/support/oidc`).
//
// node provider.mjs, configured by the environment:
//   OIDC_PORT            port on 127.0.0.1; the issuer is http://127.0.0.1:<port>
//   OIDC_CLIENT_ID       the one client registered (confidential, authorization code + PKCE)
//   OIDC_CLIENT_SECRET
//   OIDC_REDIRECT_URI    its redirect URI and post-logout redirect URI (the dashboard's /oauth2callback)
//   OIDC_ACCOUNTS        JSON object: account id -> its claims ({"lead-vision": {"name": "…", "groups": ["team:vision"]}})
//
// The development log-in form accepts any password for an account of OIDC_ACCOUNTS; consent is given without asking
// (a first-party client); the ID token carries the claims of the scopes asked for (`groups` with the `groups` scope).
// Prints "ready <issuer>" once it listens.
import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const port = Number(env('OIDC_PORT'));
const accounts = JSON.parse(env('OIDC_ACCOUNTS'));
const issuer = `http://127.0.0.1:${port}`;
const scopes = 'openid email profile groups';

const provider = new Provider(issuer, {
  clients: [{
    client_id: env('OIDC_CLIENT_ID'),
    client_secret: env('OIDC_CLIENT_SECRET'),
    redirect_uris: [env('OIDC_REDIRECT_URI')],
    post_logout_redirect_uris: [env('OIDC_REDIRECT_URI')],
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  scopes: scopes.split(' '),
  claims: { openid: ['sub'], email: ['email'], profile: ['name', 'preferred_username'], groups: ['groups'] },
  conformIdTokenClaims: false, // the ID token carries the scopes' claims: Streamlit reads only the ID token
  cookies: { keys: ['gpu-finops-test-only'] },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  async findAccount(ctx, id) {
    if (!Object.hasOwn(accounts, id)) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, preferred_username: id, ...accounts[id] }) };
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(scopes);
    await grant.save();
    return grant;
  },
});

const server = provider.listen(port, '127.0.0.1', () => console.log(`ready ${issuer}`));
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
