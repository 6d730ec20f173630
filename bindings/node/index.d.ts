// Types of the onesync package. better-sqlite3's own types (@types/better-sqlite3) are not
// required: `load` takes anything with loadExtension, and `open` returns the Database
// type you name (open<Database.Database>(...)), `any` by default.

/** The part of a better-sqlite3 Database that `load` uses. */
export interface LoadsExtensions {
  loadExtension(path: string, entryPoint?: string): unknown;
}

export interface LoadOptions {
  /** Also make onesync SQLite's default VFS: `new Database(path)` then opens stores. */
  default?: boolean;
}

/** The path of the bundled libonesync.so. */
export function loadablePath(): string;

/** Registers the onesync VFS with the SQLite behind `db`; returns `db`. */
export function load<T extends LoadsExtensions>(db: T, options?: LoadOptions): T;

/** A better-sqlite3 Database on the onesync store at `filename` (created if missing). */
export function open<D = any>(filename: string, options?: Record<string, unknown>): D;
