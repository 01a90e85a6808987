import { defineConfig } from 'drizzle-kit';

// Migrations are generated from the schema and committed; the controller applies them on start.
export default defineConfig({
  dialect: 'sqlite',
  schema: './functions/ledger/schema.ts',
  out: './functions/ledger/migrations',
});
