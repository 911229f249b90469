//! The Lua 5.1 VM a node runs scripts in (mlua, Lua built from source), set up like Redis 7.0's:
//!
//! - **Sandbox.** The base, table, string and math libraries plus `bit`, `cjson`, `cmsgpack` and
//!   `struct`; no `os`,
//!   `io`, `package`, `require`, `dofile`, `loadfile`, `setfenv`/`getfenv` or `debug`. Globals,
//!   the libraries and `redis` are read-only: a script that assigns a global gets Redis's
//!   "Attempt to modify a readonly table", one that reads a missing global "Script attempted to
//!   access nonexistent global variable". `loadstring` compiles text only (bytecode could crash
//!   the VM), into the same read-only environment. Memory is capped for the whole VM
//!   (`--lua-memory-limit`); a script past it fails, and the VM stays usable.
//! - **The `redis` library**: `call`, `pcall`, `error_reply`, `status_reply`, `sha1hex`, `log`,
//!   `setresp`, `set_repl`, `replicate_commands`, `breakpoint`, `debug` and the `LOG_*`/`REPL_*`
//!   constants, with Redis's argument checks and texts.
//! - **Running**: a script is compiled once per SHA (chunk name `@user_script`, as Redis names it,
//!   so positions read `user_script:1:`), called under `xpcall` with an error handler that adds
//!   where it failed, exactly as Redis words it: `<error> script: <sha>, on @user_script:<line>.`
//!   A hook every [`HOOK_EVERY`] instructions lets SCRIPT KILL stop a script that has not written.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, Variadic};
use shoal_wire::proto::Frame;

use super::call::{self, RunCtx};
use super::convert::{error_table, fmt_g, frame_to_lua, lua_to_frame, number_arg, status_table};
use super::shared::Shared;
use crate::commands::F;

/// Instructions between two checks for SCRIPT KILL.
const HOOK_EVERY: u32 = 100_000;

/// What Redis 7.0.15 reports as its version to scripts (`redis.REDIS_VERSION`).
const VERSION: &str = "7.0.15";
const VERSION_NUM: i64 = 0x07_00_0f;

/// FCALL of a function no library registered.
pub const FUNCTION_NOT_FOUND: &str = "ERR Function not found";

/// Raised as a plain Lua error string (the error handler gives it its `ERR` code).
pub const KILLED: &str = "Script killed by user with SCRIPT KILL...";

/// An error the `redis` library raises as Redis does, as an error table (`{err="CODE ..."}`):
/// the error handler keeps its text as it is, and `pcall` turns it into that text. Errors raised
/// as plain strings (Lua's own, cjson's, `bit`'s) get `ERR ` from the handler instead.
#[derive(Debug)]
pub struct RedisError(pub String);

impl std::fmt::Display for RedisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RedisError {}

pub fn redis_error(text: impl Into<String>) -> mlua::Error {
    mlua::Error::external(RedisError(text.into()))
}

/// An error raised in Rust: its text, and whether it is an error table (see [`RedisError`]).
pub(super) fn classify(e: &mlua::Error) -> (String, bool) {
    match e {
        mlua::Error::CallbackError { cause, .. } => classify(cause),
        mlua::Error::ExternalError(inner) => match inner.downcast_ref::<RedisError>() {
            Some(r) => (r.0.clone(), true),
            None => (inner.to_string(), false),
        },
        mlua::Error::RuntimeError(m) => (m.clone(), false),
        mlua::Error::MemoryError(_) => {
            ("not enough memory (the script passed --lua-memory-limit)".into(), false)
        }
        mlua::Error::SyntaxError { message, .. } => (message.clone(), false),
        other => (other.to_string(), false),
    }
}

/// The prelude's chunk name (a kill is never raised inside its functions: [`KillHook`]).
pub(super) const PRELUDE_NAME: &str = "=shoal";

/// Sets the sandbox up; runs once, with the full environment, before any user code.
const PRELUDE: &str = r#"
local G, error_text = ...
local error, type, rawset, setmetatable, tostring, loadstring, setfenv, pcall =
      error, type, rawset, setmetatable, tostring, loadstring, setfenv, pcall
for _, name in ipairs({'dofile', 'loadfile', 'print', 'require', 'module', 'setfenv', 'getfenv',
                       'newproxy', 'os', 'io', 'package', 'debug'}) do
  G[name] = nil
end
local protected = {}
local function readonly(t)
  local proxy = {}
  protected[proxy] = true
  setmetatable(proxy, {
    __index = t,
    __newindex = function() error('Attempt to modify a readonly table', 2) end,
    __metatable = false,
  })
  return proxy
end
-- Library tables are replaced by read-only views of themselves; `server` is Valkey 8's name
-- for `redis` (the same view).
for _, name in ipairs({'string', 'table', 'math', 'coroutine', 'bit', 'cjson', 'redis'}) do
  G[name] = readonly(G[name])
end
G.server = G.redis
-- Redis's pcall: an error table comes back as its text.
local function pcall_result(ok, ...)
  if ok then return ok, ... end
  return false, error_text((...))
end
G.pcall = function(f, ...)
  return pcall_result(pcall(f, ...))
end
-- rawset and setmetatable cannot change a read-only view either (Redis raises these from C,
-- without a position).
G.rawset = function(t, k, v)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return rawset(t, k, v)
end
G.setmetatable = function(t, m)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable(t, m)
end
-- Scripts see the globals through a read-only view; a missing one is an error.
setmetatable(G, {
  __index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
})
local env = readonly(G)
G._G = env
G.loadstring = function(s, name)
  if type(s) == 'string' and s:byte(1) == 27 then
    return nil, 'loading binary chunks is not allowed'
  end
  local f, e = loadstring(s, name)
  if f then setfenv(f, env) end
  return f, e
end
getmetatable('').__metatable = false
-- Library functions (FUNCTION LOAD) see globals of their own: an empty read-only table whose
-- lookups go to the load-time API while a library loads and to `env` once it runs, as Redis
-- swaps its function VM's globals. `invoke` calls one with its keys and arguments under the
-- error handler (xpcall passes no arguments in Lua 5.1).
local fn_meta = {
  __newindex = function() error('Attempt to modify a readonly table', 2) end,
  __metatable = false,
}
local fn_globals = setmetatable({}, fn_meta)
protected[fn_globals] = true
local function invoke(f, handler, keys, args)
  return xpcall(function() return f(keys, args) end, handler)
end
return env, readonly, fn_globals, fn_meta, invoke
"#;

/// Builds the load-time globals of function libraries from the VM, its globals and the
/// sandbox's read-only wrapper.
pub type LoadApi = fn(&Lua, &Table, &Function) -> mlua::Result<Table>;

/// A compiled script (or a library's function) and how it may run.
pub(super) struct Compiled {
    pub(super) function: Function,
    pub(super) flags: Flags,
}

/// The flags of a `#!lua flags=...` first line or of `redis.register_function`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags {
    pub no_writes: bool,
    pub allow_oom: bool,
}

pub struct Engine {
    pub(super) lua: Lua,
    functions: HashMap<String, Compiled>,
    /// The read-only environment scripts run in.
    pub(super) env: Table,
    /// The real globals (KEYS and ARGV are set here).
    globals: Table,
    xpcall: Function,
    handler: Function,
    /// Library functions by name, and the registry generation they were built from
    /// (`super::functions`).
    pub(super) library: HashMap<String, Compiled>,
    pub(super) library_generation: u64,
    /// Library functions' globals, their metatable (whose `__index` switches between the
    /// load-time API and `env`), the load-time API, and the caller that passes keys and args.
    pub(super) fn_globals: Table,
    pub(super) fn_meta: Table,
    pub(super) load_api: Table,
    invoke: Function,
    kill_hook: KillHook,
}

/// The hook that stops a script at SCRIPT KILL / FUNCTION KILL (and a FUNCTION LOAD past its
/// deadline): every [`HOOK_EVERY`] instructions it looks at the kill flag.
#[derive(Clone)]
struct KillHook {
    shared: Arc<Shared>,
    /// Set once a kill made the hook fire at every instruction; the next run puts it back.
    every_instruction: Arc<std::sync::atomic::AtomicBool>,
}

impl KillHook {
    fn install(&self, lua: &Lua, every: u32) -> mlua::Result<()> {
        let hook = self.clone();
        lua.set_hook(HookTriggers::new().every_nth_instruction(every), move |lua, debug| {
            hook.check(lua, debug)
        })
    }

    fn check(&self, lua: &Lua, debug: &mlua::debug::Debug) -> mlua::Result<mlua::VmState> {
        // Only while a script or function runs: a FUNCTION LOAD's code is stopped by its
        // deadline, never by a kill meant for the script before it.
        let running = self.shared.running_since.load(Ordering::Relaxed) != 0;
        if running && self.shared.kill.load(Ordering::Relaxed) {
            if !self.every_instruction.swap(true, Ordering::Relaxed) {
                // As Redis: once killed, the hook fires at every instruction, so a script that
                // catches the kill with pcall meets it again as soon as it is outside that pcall
                // (`while 1 do pcall(f) end` would otherwise never end). Not inside the sandbox's
                // own Lua (its pcall wrapper, the function caller): the error is raised in the
                // script's code, and ends the script as an error there does.
                self.install(lua, 1)?;
            } else if debug.source().source.as_deref() == Some(PRELUDE_NAME) {
                return Ok(mlua::VmState::Continue);
            }
            return Err(mlua::Error::RuntimeError(KILLED.into()));
        }
        if !running {
            // A kill's every-instruction hook outlived its script.
            self.rearm(lua);
        }
        if self.shared.loading_past_deadline() {
            return Err(redis_error("ERR FUNCTION LOAD timeout"));
        }
        Ok(mlua::VmState::Continue)
    }

    /// Before a run: the hook back to every [`HOOK_EVERY`] instructions after a kill.
    fn rearm(&self, lua: &Lua) {
        if self.every_instruction.swap(false, Ordering::Relaxed)
            && let Err(e) = self.install(lua, HOOK_EVERY)
        {
            tracing::error!(error = %e, "the script kill hook could not be put back");
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("scripts", &self.functions.len()).finish()
    }
}

/// A script's outcome: its reply, whether (and what) it wrote, and the ACL refusals its calls met.
pub struct Outcome {
    pub reply: Frame,
    pub written: Vec<Bytes>,
    pub denials: Vec<shoal_wire::proto::AclDenial>,
    /// The commands its calls ran (`RunCtx::calls`).
    pub calls: Vec<shoal_wire::proto::ScriptCall>,
    /// MONITOR lines of its calls (`RunCtx::monitor`).
    pub monitor: Vec<Bytes>,
    /// Its holds on other nodes, given back (`RunCtx::reach`: whether it reached a node, or was
    /// given up to be sent again).
    pub reach: Option<super::reach::Reach>,
}

impl Engine {
    /// A VM; `load_api` builds the globals a function library's code sees while it loads
    /// (`super::functions::load_api`, given here so the VM does not import the functions above it).
    pub fn new(shared: Arc<Shared>, memory_limit: usize, load_api: LoadApi) -> mlua::Result<Engine> {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())?;
        let globals = lua.globals();
        globals.raw_set("redis", redis_library(&lua)?)?;
        globals.raw_set("cjson", super::cjson::library(&lua)?)?;
        globals.raw_set("bit", super::bit::library(&lua)?)?;
        globals.raw_set("cmsgpack", super::cmsgpack::library(&lua)?)?;
        globals.raw_set("struct", super::lua_struct::library(&lua)?)?;
        let xpcall: Function = globals.raw_get("xpcall")?;
        let prelude = lua.load(PRELUDE).set_name(PRELUDE_NAME).into_function()?;
        let error_text = lua.create_function(|lua, e: Value| {
            Ok(match &e {
                Value::Table(t) => match t.raw_get::<Value>("err")? {
                    v @ (Value::String(_) | Value::Number(_) | Value::Integer(_)) => v,
                    _ => e,
                },
                Value::Error(err) => Value::String(lua.create_string(classify(err).0)?),
                _ => e,
            })
        })?;
        let (env, readonly, fn_globals, fn_meta, invoke): (Table, Function, Table, Table, Function) =
            prelude.call((globals.clone(), error_text))?;
        let load_api = load_api(&lua, &globals, &readonly)?;
        fn_meta.raw_set("__index", env.clone())?;
        let handler = lua.create_function(error_handler)?;
        lua.set_memory_limit(memory_limit)?;
        let kill_hook = KillHook { shared: shared.clone(), every_instruction: Arc::default() };
        kill_hook.install(&lua, HOOK_EVERY)?;
        Ok(Engine {
            lua,
            functions: HashMap::new(),
            env,
            globals,
            xpcall,
            handler,
            library: HashMap::new(),
            library_generation: 0,
            fn_globals,
            fn_meta,
            load_api,
            invoke,
            kill_hook,
        })
    }

    pub fn has(&self, sha: &str) -> bool {
        self.functions.contains_key(sha)
    }

    pub fn flush(&mut self) {
        self.functions.clear();
        let _ = self.lua.gc_collect();
    }

    /// Compiles `body` and keeps it under `sha`; the error is Redis's text.
    pub fn compile(&mut self, sha: &str, body: &[u8]) -> Result<(), String> {
        if self.functions.contains_key(sha) {
            return Ok(());
        }
        let (flags, code) = shebang(body)?;
        let function = self
            .lua
            .load(code)
            .set_name("@user_script")
            .set_mode(mlua::chunk::ChunkMode::Text)
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| format!("ERR Error compiling script (new function): {}", compile_message(&e)))?;
        self.functions.insert(sha.to_string(), Compiled { function, flags });
        Ok(())
    }

    /// Runs the compiled script `sha` with `keys` and `args`; `ctx` is what its calls need.
    pub fn run(&mut self, sha: &str, keys: &[Bytes], args: &[Bytes], mut ctx: RunCtx) -> Outcome {
        let Some(compiled) = self.functions.get(sha) else {
            return Outcome {
                reply: F::error(shoal_wire::script::NOSCRIPT.into()),
                written: Vec::new(),
                denials: Vec::new(),
                calls: Vec::new(),
                monitor: Vec::new(),
                reach: Some(ctx.reach),
            };
        };
        ctx.readonly |= compiled.flags.no_writes;
        ctx.allow_oom |= compiled.flags.allow_oom;
        let function = compiled.function.clone();
        self.kill_hook.rearm(&self.lua);
        let called = self.set_arguments(keys, args).map(|()| {
            let xpcall = self.xpcall.clone();
            let handler = self.handler.clone();
            move || xpcall.call::<MultiValue>((function, handler))
        });
        let outcome = self.execute(sha, called, ctx);
        let _ = self.globals.raw_set("KEYS", Value::Nil);
        let _ = self.globals.raw_set("ARGV", Value::Nil);
        outcome
    }

    /// Runs library function `name` (FCALL): called with its keys and arguments as two tables,
    /// its errors worded with its name where a script's carry its SHA.
    pub fn call_function(&mut self, name: &str, keys: &[Bytes], args: &[Bytes], mut ctx: RunCtx) -> Outcome {
        let Some(compiled) = self.library.get(&name.to_ascii_lowercase()) else {
            return Outcome {
                reply: F::error(FUNCTION_NOT_FOUND.into()),
                written: Vec::new(),
                denials: Vec::new(),
                calls: Vec::new(),
                monitor: Vec::new(),
                reach: Some(ctx.reach),
            };
        };
        ctx.readonly |= compiled.flags.no_writes;
        ctx.allow_oom |= compiled.flags.allow_oom;
        let function = compiled.function.clone();
        self.kill_hook.rearm(&self.lua);
        let list = |items: &[Bytes]| -> mlua::Result<Table> {
            let t = self.lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item)?)?;
            }
            Ok(t)
        };
        let called = list(keys).and_then(|k| Ok((k, list(args)?))).map(|(k, a)| {
            let invoke = self.invoke.clone();
            let handler = self.handler.clone();
            move || invoke.call::<MultiValue>((function, handler, k, a))
        });
        self.execute(name, called, ctx)
    }

    /// Runs `called` with `ctx` as the calls' context; `label` names the script in errors.
    fn execute(
        &mut self,
        label: &str,
        called: mlua::Result<impl FnOnce() -> mlua::Result<MultiValue>>,
        ctx: RunCtx,
    ) -> Outcome {
        let reply = match called {
            Ok(call) => {
                self.lua.set_app_data(ctx);
                let result = call();
                let script_resp3 = self.lua.app_data_ref::<RunCtx>().is_some_and(|c| c.resp3);
                match result {
                    Ok(values) => outcome_frame(values, label, script_resp3),
                    Err(e) => F::error(format!("ERR Error running script {label}: {}", message(&e))),
                }
            }
            Err(e) => F::error(format!("ERR Error running script {label}: {}", message(&e))),
        };
        // The context's holds on other nodes go back to the caller (`reach.rs`).
        let (written, denials, calls, monitor, reach) = match self.lua.remove_app_data::<RunCtx>() {
            Some(c) => (c.written, c.denials, c.calls, c.monitor, Some(c.reach)),
            None => Default::default(),
        };
        let _ = self.lua.gc_step();
        Outcome { reply, written, denials, calls, monitor, reach }
    }

    fn set_arguments(&self, keys: &[Bytes], args: &[Bytes]) -> mlua::Result<()> {
        let list = |items: &[Bytes]| -> mlua::Result<Table> {
            let t = self.lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item)?)?;
            }
            Ok(t)
        };
        self.globals.raw_set("KEYS", list(keys)?)?;
        self.globals.raw_set("ARGV", list(args)?)?;
        Ok(())
    }
}

/// `xpcall`'s results as the client's reply: the script's first return value, or its error as
/// Redis words it.
fn outcome_frame(values: MultiValue, sha: &str, script_resp3: bool) -> Frame {
    let mut values = values.into_iter();
    let ok = matches!(values.next(), Some(Value::Boolean(true)));
    let first = values.next().unwrap_or(Value::Nil);
    if ok {
        return lua_to_frame(&first, script_resp3);
    }
    match &first {
        Value::Table(t) => {
            let err: String = t.raw_get::<Value>("err").ok().and_then(|v| text(&v)).unwrap_or_default();
            let source = t.raw_get::<Value>("source").ok().and_then(|v| text(&v));
            let line = t.raw_get::<Value>("line").ok().and_then(|v| text(&v));
            match (source, line) {
                (Some(source), Some(line)) => F::error(format!("{err} script: {sha}, on {source}:{line}.")),
                _ => F::error(err),
            }
        }
        // A memory error skips the handler (Lua 5.1 does not call it for those).
        other => F::error(format!(
            "ERR Error running script {sha}: {}",
            text(other).unwrap_or_else(|| "execution failure".into())
        )),
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        // Lua 5.1 has doubles only; mlua shows the integral ones as integers.
        Value::Integer(n) => Some(number_text(*n as f64)),
        Value::Number(n) => Some(number_text(*n)),
        Value::Error(e) => Some(message(e)),
        _ => None,
    }
}

/// A Lua number as `tostring` prints it (C's `%.14g`; glibc writes a NaN with its sign).
fn number_text(n: f64) -> String {
    match n {
        n if n.is_nan() => if n.is_sign_negative() { "-nan" } else { "nan" }.to_string(),
        n => fmt_g(n, 14),
    }
}

/// The text of an error raised in Rust or by Lua.
fn message(e: &mlua::Error) -> String {
    classify(e).0
}

fn compile_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => message(other),
    }
}

/// The error handler: turns whatever was raised into `{err=..., source=..., line=...}`, where
/// source and line are those of the innermost Lua function running (as Redis's handler finds
/// them from the stack; the sandbox's own helpers, chunk `=shoal`, do not count). A Lua error
/// value gets the `ERR ` code; errors raised by the `redis` library already have theirs.
fn error_handler(lua: &Lua, err: Value) -> mlua::Result<Table> {
    let t = match &err {
        Value::Table(t) if matches!(t.raw_get::<Value>("err")?, Value::String(_)) => t.clone(),
        Value::Error(e) => match classify(e) {
            (text, true) => table_with(lua, &text)?,
            (text, false) => table_with(lua, &format!("ERR {text}"))?,
        },
        Value::Nil => table_with(lua, "ERR nil")?,
        Value::Boolean(b) => table_with(lua, &format!("ERR {b}"))?,
        other => {
            table_with(lua, &format!("ERR {}", text(other).unwrap_or_else(|| other.type_name().into())))?
        }
    };
    for level in 0..64 {
        let Some(found) = lua.inspect_stack(level, |d| {
            let source = d.source().source.map(|s| s.into_owned());
            (source, d.current_line())
        }) else {
            break;
        };
        if let (Some(source), Some(line)) = found
            && !source.starts_with('=')
        {
            t.raw_set("source", source)?;
            t.raw_set("line", line)?;
            break;
        }
    }
    Ok(t)
}

fn table_with(lua: &Lua, err: &str) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("err", err)?;
    Ok(t)
}

/// `redis.call` and `redis.pcall`'s work: the reply converted for the script, or the error
/// reply's text (`redis.call` raises it, `redis.pcall` returns it as `{err=...}`). Both are Rust
/// functions: a Lua wrapper would be tail-called by `return redis.call(...)`, and the script's
/// line would be lost from the error.
fn run_call(lua: &Lua, args: MultiValue) -> mlua::Result<Result<Value, String>> {
    if args.is_empty() {
        return Ok(Err("ERR Please specify at least one argument for this redis lib call".into()));
    }
    let mut argv = Vec::with_capacity(args.len());
    for a in args {
        match a {
            Value::String(s) => argv.push(Bytes::copy_from_slice(&s.as_bytes())),
            // A Lua 5.1 number is a double (mlua shows integral ones as integers): `%.17g` both.
            Value::Integer(n) => argv.push(number_arg(n as f64)),
            Value::Number(n) => argv.push(number_arg(n)),
            _ => return Ok(Err("ERR Lua redis lib command arguments must be strings or integers".into())),
        }
    }
    let Some(mut ctx) = lua.app_data_mut::<RunCtx>() else {
        return Ok(Err("ERR redis.call outside a script".into()));
    };
    let frame = call::call(&mut ctx, &argv);
    let resp3 = ctx.resp3;
    drop(ctx);
    match frame.kind {
        Some(shoal_wire::proto::frame::Kind::Error(e)) => Ok(Err(e)),
        _ => Ok(Ok(frame_to_lua(lua, &frame, resp3)?)),
    }
}

/// The `redis` table.
fn redis_library(lua: &Lua) -> mlua::Result<Table> {
    let redis = lua.create_table()?;
    add_calls(lua, &redis)?;
    add_replies(lua, &redis)?;
    add_log(lua, &redis)?;
    add_replication(lua, &redis)?;
    add_constants(&redis)?;
    Ok(redis)
}

/// A Redis error raised in the script (the Lua error `redis.call` and the helpers raise).
fn raise(text: &str) -> mlua::Result<Value> {
    Err(redis_error(text))
}

/// `redis.call` (errors raised) and `redis.pcall` (errors returned as tables).
fn add_calls(lua: &Lua, redis: &Table) -> mlua::Result<()> {
    redis.raw_set(
        "call",
        lua.create_function(|lua, args: MultiValue| match run_call(lua, args)? {
            Ok(v) => Ok(v),
            Err(e) => Err(redis_error(e)),
        })?,
    )?;
    redis.raw_set(
        "pcall",
        lua.create_function(|lua, args: MultiValue| match run_call(lua, args)? {
            Ok(v) => Ok(v),
            Err(e) => error_table(lua, &e),
        })?,
    )?;
    Ok(())
}

/// `redis.error_reply`, `redis.status_reply` and `redis.sha1hex`.
fn add_replies(lua: &Lua, redis: &Table) -> mlua::Result<()> {
    redis.raw_set(
        "error_reply",
        lua.create_function(move |lua, v: Variadic<Value>| match v.first() {
            Some(Value::String(s)) if v.len() == 1 => error_table(lua, &error_code_text(&s.as_bytes())),
            _ => error_table(lua, "ERR wrong number or type of arguments"),
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(move |lua, v: Variadic<Value>| match v.first() {
            Some(Value::String(s)) if v.len() == 1 => status_table(lua, &s.as_bytes()),
            _ => error_table(lua, "ERR wrong number or type of arguments"),
        })?,
    )?;
    redis.raw_set(
        "sha1hex",
        lua.create_function(move |lua, v: Variadic<Value>| match v.as_slice() {
            [Value::String(s)] => {
                Ok(Value::String(lua.create_string(shoal_wire::script::sha1_hex(&s.as_bytes()))?))
            }
            // As Lua's tostring writes a number (mlua shows integral ones as integers).
            [Value::Integer(n)] => Ok(Value::String(
                lua.create_string(shoal_wire::script::sha1_hex(number_text(*n as f64).as_bytes()))?,
            )),
            [Value::Number(n)] => Ok(Value::String(
                lua.create_string(shoal_wire::script::sha1_hex(number_text(*n).as_bytes()))?,
            )),
            _ => raise("ERR wrong number of arguments"),
        })?,
    )?;
    Ok(())
}

/// `redis.log`, to the node's log at the level's nearest match.
fn add_log(lua: &Lua, redis: &Table) -> mlua::Result<()> {
    redis.raw_set(
        "log",
        lua.create_function(move |_, v: Variadic<Value>| {
            if v.len() < 2 {
                return raise("ERR redis.log() requires two arguments or more.");
            }
            let level = match &v[0] {
                Value::Integer(n) => *n,
                Value::Number(n) => *n as i64,
                _ => return raise("ERR First argument must be a number (log level)."),
            };
            if !(0..=3).contains(&level) {
                return raise("ERR Invalid debug level.");
            }
            let words: Vec<String> = v[1..].iter().filter_map(text).collect();
            let line = words.join(" ");
            match level {
                0 => tracing::debug!(target: "shoal::script", "{line}"),
                1 | 2 => tracing::info!(target: "shoal::script", "{line}"),
                _ => tracing::warn!(target: "shoal::script", "{line}"),
            }
            Ok(Value::Nil)
        })?,
    )?;
    Ok(())
}

/// `redis.setresp`, and the replication and debugging calls Redis keeps for old scripts.
fn add_replication(lua: &Lua, redis: &Table) -> mlua::Result<()> {
    redis.raw_set(
        "setresp",
        lua.create_function(move |lua, v: Variadic<Value>| {
            if v.len() != 1 {
                return raise("ERR redis.setresp() requires one argument.");
            }
            let resp = match &v[0] {
                Value::Integer(n) => *n,
                Value::Number(n) => *n as i64,
                _ => -1,
            };
            if resp != 2 && resp != 3 {
                return raise("ERR RESP version must be 2 or 3.");
            }
            if let Some(mut ctx) = lua.app_data_mut::<RunCtx>() {
                ctx.resp3 = resp == 3;
            }
            Ok(Value::Nil)
        })?,
    )?;
    redis.raw_set(
        "set_repl",
        lua.create_function(move |_, v: Variadic<Value>| match v.as_slice() {
            [Value::Integer(n)] if (0..=3).contains(n) => Ok(Value::Nil),
            [Value::Number(n)] if (0.0..=3.0).contains(n) => Ok(Value::Nil),
            [_] => raise("ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."),
            // Redis's text says two, though it takes one.
            _ => raise("ERR redis.set_repl() requires two arguments."),
        })?,
    )?;
    redis.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    redis.raw_set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
    redis.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    Ok(())
}

/// The `LOG_*` and `REPL_*` levels and the Redis version a script sees.
fn add_constants(redis: &Table) -> mlua::Result<()> {
    for (name, v) in [("LOG_DEBUG", 0), ("LOG_VERBOSE", 1), ("LOG_NOTICE", 2), ("LOG_WARNING", 3)] {
        redis.raw_set(name, v)?;
    }
    for (name, v) in
        [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)]
    {
        redis.raw_set(name, v)?;
    }
    redis.raw_set("REDIS_VERSION", VERSION)?;
    redis.raw_set("REDIS_VERSION_NUM", VERSION_NUM)?;
    Ok(())
}

/// `redis.error_reply`'s text as Redis builds it (`luaPushErrorBuff` after a `-` is put in
/// front): the first word is the error code (`MY text` → `MY text`), and a single word gets
/// `ERR` as its code (`x` → `ERR x`).
fn error_code_text(s: &[u8]) -> String {
    let s = String::from_utf8_lossy(s);
    let rest = s.strip_prefix('-').unwrap_or(&s);
    let (code, msg) = match rest.split_once(' ') {
        Some((code, msg)) => (code, msg),
        None => ("ERR", rest),
    };
    format!("{code} {}", msg.trim_matches(['\r', '\n']))
}

/// Splits a `#!lua flags=a,b` first line off `body` (keeping its newline, so line numbers hold).
fn shebang(body: &[u8]) -> Result<(Flags, &[u8]), String> {
    if !body.starts_with(b"#!") {
        return Ok((Flags::default(), body));
    }
    let end = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[2..end]).into_owned();
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or_default();
    if engine != "lua" {
        return Err(format!("ERR Unexpected engine in script shebang: #!{engine}"));
    }
    let mut flags = Flags::default();
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        for flag in list.split(',').filter(|f| !f.is_empty()) {
            match flag {
                "no-writes" => flags.no_writes = true,
                "allow-oom" => flags.allow_oom = true,
                "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => return Err(format!("ERR Unexpected flag in script shebang: {other}")),
            }
        }
    }
    Ok((flags, &body[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_reply_texts_like_redis() {
        assert_eq!(error_code_text(b"x"), "ERR x");
        assert_eq!(error_code_text(b"-ERR x"), "ERR x");
        assert_eq!(error_code_text(b"MY err"), "MY err");
        assert_eq!(error_code_text(b"-MY err"), "MY err");
        assert_eq!(error_code_text(b"-CODE"), "ERR CODE");
    }

    #[test]
    fn shebang_flags() {
        let (f, rest) = shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.no_writes && f.allow_oom);
        assert_eq!(rest, b"\nreturn 1", "the newline stays, so line numbers hold");
        assert_eq!(shebang(b"#!python\n").unwrap_err(), "ERR Unexpected engine in script shebang: #!python");
        assert_eq!(shebang(b"#!lua flags=bad\n").unwrap_err(), "ERR Unexpected flag in script shebang: bad");
        assert_eq!(shebang(b"#!lua x=1\n").unwrap_err(), "ERR Unknown lua shebang option: x=1");
        assert!(!shebang(b"return 1").unwrap().0.no_writes);
    }
}
