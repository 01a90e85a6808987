import { doctorMain } from './doctor-main.ts';

/** Standalone provisioning doctor for operators (`npm run doctor -- …`); see doctor-main.ts. */
process.exitCode = await doctorMain(process.argv.slice(2), process.env);
