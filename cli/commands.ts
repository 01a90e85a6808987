/**
 * sparkctl's commands, one `cmdX(ctx)` each, answering with an exit code (`cli/errors.ts`):
 * reservations (reservation-commands.ts), what the controller shows (view-commands.ts), operator
 * actions (operator-commands.ts) and tokens (token-commands.ts). `cli/main.ts` wires them to
 * commander.
 */
export type { CommandContext, CommandIo, Flags } from './command-context.ts';
export { cmdDeckard, cmdEmergency, cmdHost, cmdRecover } from './operator-commands.ts';
export { cmdAttach, cmdCancel, cmdRelease, cmdRenew, cmdReserve } from './reservation-commands.ts';
export { cmdToken, cmdWhoami, printNewToken } from './token-commands.ts';
export { cmdFleet, cmdHistory, cmdQueue, cmdStatus } from './view-commands.ts';
