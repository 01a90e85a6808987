/**
 * Writes `spark.config.schema.json` (JSON Schema for editors) from the zod config schema.
 * `npm run config:schema`; a test fails when the committed file is out of date.
 */
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { ConfigSchema } from '../core/config.ts';

export function configJsonSchema(): string {
  const schema = z.toJSONSchema(ConfigSchema, { io: 'input', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return `${JSON.stringify(
    {
      ...schema,
      $id: 'https://spark-controller.dev/spark.config.schema.json',
      title: 'Spark Controller configuration',
    },
    null,
    2,
  )}\n`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'spark.config.schema.json');
  writeFileSync(out, configJsonSchema());
  console.log(`wrote ${out}`);
}
