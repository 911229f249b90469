//! Redis 7.0 functions: libraries (`#!lua name=<lib>` code calling `redis.register_function`),
//! the FUNCTION command (LOAD, DELETE, FLUSH, LIST, DUMP, RESTORE, STATS) and FCALL's lookup,
//! with Redis's texts (its `functions.c` and `function_lua.c`).
//!
//! The node keeps its libraries' code in a [`Registry`] (in [`Shared`]: FUNCTION STATS and
//! snapshots read it without the script thread); the script thread keeps the functions compiled
//! in its VM ([`Engine::library`]) and rebuilds them from the registry whenever its generation
//! moved without it (a VM started afresh, a snapshot loaded). A library loads in the VM's
//! function globals while their lookups go to the load-time API (`redis.register_function`,
//! `redis.log`, the constants: nothing else, as in Redis), then runs against the sandbox's
//! globals. Library and function order in FUNCTION LIST and DUMP is by name (Redis's is its hash
//! table's, which no client can rely on).

use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Table, Value};
use shoal_wire::proto::Frame;

use super::engine::{Compiled, Engine, Flags, classify, redis_error, text};
use super::registry::{BAD_NAME, FLAG_NAMES, FnMeta, Library, Registry, metadata, payload_codes, valid_name};
use super::shared::Shared;
use crate::commands::F;
use crate::rdb;
use crate::store::libraries::{Libraries, Payload};

/// How long a library's top-level code may run when it loads (Redis's `LOAD_TIMEOUT_MS`).
pub const LOAD_TIMEOUT_MS: u64 = 500;

/// A function `redis.register_function` registered while a library loads.
pub(super) struct Registered {
    name: String,
    meta: FnMeta,
    function: Function,
}

/// What `redis.register_function` collects (app data while a library loads).
#[derive(Default)]
struct Loading {
    fns: Vec<Registered>,
}

/// The globals a library's top-level code sees: `redis` with `register_function`, `log` and the
/// constants, read-only; any other name is an error.
pub(super) fn load_api(lua: &Lua, globals: &Table, readonly: &Function) -> mlua::Result<Table> {
    let full: Table = globals.raw_get("redis")?;
    let redis = lua.create_table()?;
    redis.raw_set("register_function", lua.create_function(register_function)?)?;
    for name in
        ["log", "LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING", "REDIS_VERSION", "REDIS_VERSION_NUM"]
    {
        redis.raw_set(name, full.get::<Value>(name)?)?;
    }
    let _ = readonly;
    // Like the globals, a missing field of this `redis` is an error (`redis.call` at load time
    // is "nonexistent global variable 'call'", as Redis words it).
    let strict: Table = lua
        .load(
            "local raw = ...\n\
             return setmetatable({}, {\n\
               __index = function(_, k)\n\
                 local v = raw[k]\n\
                 if v == nil then\n\
                   error(\"Script attempted to access nonexistent global variable '\" .. tostring(k) .. \"'\", 2)\n\
                 end\n\
                 return v\n\
               end,\n\
               __newindex = function() error('Attempt to modify a readonly table', 2) end,\n\
               __metatable = false,\n\
             })",
        )
        .set_name(super::engine::PRELUDE_NAME)
        .call(redis)?;
    let api = lua.create_table()?;
    api.raw_set("redis", strict.clone())?;
    // Valkey 8's name for it (its test suite and newer libraries register with it).
    api.raw_set("server", strict)?;
    let missing = lua.create_table()?;
    missing.raw_set(
        "__index",
        lua.load(
            "return function(_, k) error(\"Script attempted to access nonexistent global variable '\" .. \
             tostring(k) .. \"'\", 2) end",
        )
        .set_name(super::engine::PRELUDE_NAME)
        .call::<Function>(())?,
    )?;
    api.set_metatable(Some(missing))?;
    Ok(api)
}

/// A Lua string or number as `lua_tostring` gives it.
fn lua_string(v: &Value) -> Option<String> {
    match v {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => text(v),
        _ => None,
    }
}

/// `redis.register_function(name, callback)` or `redis.register_function{function_name=...,
/// callback=..., flags={...}, description=...}`.
fn register_function(lua: &Lua, args: MultiValue) -> mlua::Result<()> {
    if lua.app_data_ref::<Loading>().is_none() {
        return Err(redis_error("ERR redis.register_function can only be called on FUNCTION LOAD command"));
    }
    let r = read_register_args(args).map_err(|e| redis_error(format!("ERR {e}")))?;
    let mut loading = lua.app_data_mut::<Loading>().expect("checked above");
    if !valid_name(&r.name) {
        return Err(redis_error(format!("ERR {BAD_NAME}")));
    }
    if loading.fns.iter().any(|f| f.name == r.name) {
        return Err(redis_error("ERR Function already exists in the library"));
    }
    loading.fns.push(r);
    Ok(())
}

fn read_register_args(args: MultiValue) -> Result<Registered, &'static str> {
    let args: Vec<Value> = args.into_iter().collect();
    match args.as_slice() {
        [Value::Table(t)] => read_named(t),
        [_] => Err(
            "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).",
        ),
        [name, callback] => {
            let name =
                lua_string(name).ok_or("first argument to redis.register_function must be a string")?;
            let Value::Function(function) = callback else {
                return Err("second argument to redis.register_function must be a function");
            };
            Ok(Registered { name, meta: FnMeta { desc: None, flags: 0 }, function: function.clone() })
        }
        _ => Err("wrong number of arguments to redis.register_function"),
    }
}

fn read_named(t: &Table) -> Result<Registered, &'static str> {
    let (mut name, mut desc, mut function, mut flags) = (None, None, None, 0u8);
    for pair in t.pairs::<Value, Value>() {
        let (k, v) =
            pair.map_err(|_| "named argument key given to redis.register_function is not a string")?;
        let key =
            lua_string(&k).ok_or("named argument key given to redis.register_function is not a string")?;
        match key.to_ascii_lowercase().as_str() {
            "function_name" => {
                name = Some(
                    lua_string(&v)
                        .ok_or("function_name argument given to redis.register_function must be a string")?,
                )
            }
            "description" => {
                desc = Some(Bytes::from(
                    lua_string(&v)
                        .ok_or("description argument given to redis.register_function must be a string")?,
                ))
            }
            "callback" => match v {
                Value::Function(f) => function = Some(f),
                _ => return Err("callback argument given to redis.register_function must be a function"),
            },
            "flags" => {
                let Value::Table(list) = v else {
                    return Err(
                        "flags argument to redis.register_function must be a table representing function flags",
                    );
                };
                flags = read_flags(&list).ok_or("unknown flag given")?;
            }
            _ => return Err("unknown argument given to redis.register_function"),
        }
    }
    let name = name.ok_or("redis.register_function must get a function name argument")?;
    let function = function.ok_or("redis.register_function must get a callback argument")?;
    Ok(Registered { name, meta: FnMeta { desc, flags }, function })
}

fn read_flags(list: &Table) -> Option<u8> {
    let mut flags = 0;
    for i in 1.. {
        let v: Value = list.raw_get(i).ok()?;
        if v.is_nil() {
            break;
        }
        let name = lua_string(&v)?;
        let bit = FLAG_NAMES.iter().position(|f| f.eq_ignore_ascii_case(&name))?;
        flags |= 1 << bit;
    }
    Some(flags)
}

fn engine_flags(bits: u8) -> Flags {
    Flags { no_writes: bits & 1 != 0, allow_oom: bits & 2 != 0 }
}

impl Engine {
    /// Runs a library's code (after its first line) to collect what it registers; the error is
    /// Redis's text without its `ERR ` code. Every load is bounded by FUNCTION LOAD's timeout,
    /// RESTORE's and a stored library's too (Redis runs those without one): a library whose
    /// top-level code never ends would otherwise hold the script thread, and every script of
    /// the node, for ever.
    fn load_library(&mut self, shared: &Shared, body: &[u8]) -> Result<Vec<Registered>, String> {
        let chunk = self
            .lua
            .load(body)
            .set_name("@user_function")
            .set_mode(mlua::chunk::ChunkMode::Text)
            .set_environment(self.fn_globals.clone())
            .into_function()
            .map_err(|e| format!("Error compiling function: {}", classify(&e).0))?;
        let fail = |e: mlua::Error| format!("Error registering functions: ERR {e}");
        let identity = self.lua.create_function(|_, v: Value| Ok(v)).map_err(fail)?;
        self.fn_meta.raw_set("__index", self.load_api.clone()).map_err(fail)?;
        self.lua.set_app_data(Loading::default());
        shared.set_load_deadline(LOAD_TIMEOUT_MS);
        let xpcall: Function = self.lua.globals().raw_get("xpcall").map_err(fail)?;
        let result = xpcall.call::<MultiValue>((chunk, identity));
        shared.set_load_deadline(0);
        let restored = self.fn_meta.raw_set("__index", self.env.clone());
        let loading = self.lua.remove_app_data::<Loading>().unwrap_or_default();
        restored.map_err(fail)?;
        let mut values = result.map_err(fail)?.into_iter();
        if matches!(values.next(), Some(Value::Boolean(true))) {
            return Ok(loading.fns);
        }
        let message = match values.next().unwrap_or(Value::Nil) {
            Value::Table(t) => match t.raw_get::<Value>("err").ok().as_ref().and_then(text) {
                Some(e) => e,
                None => "ERR unknown error".into(),
            },
            Value::Error(e) => match classify(&e) {
                (t, true) => t,
                (t, false) => format!("ERR {t}"),
            },
            other => format!("ERR {}", text(&other).unwrap_or_else(|| other.type_name().into())),
        };
        Err(format!("Error registering functions: {message}"))
    }

    /// Compiles library `code` as FUNCTION LOAD does, against `existing` (whose library of the
    /// same name it replaces if `replace`). The error is Redis's text without `ERR `.
    fn create(
        &mut self,
        shared: &Shared,
        existing: &Registry,
        code: &Bytes,
        replace: bool,
    ) -> Result<(Library, Vec<Registered>), String> {
        let (name, body) = metadata(code)?;
        if existing.libs.contains_key(&name) && !replace {
            return Err(format!("Library '{name}' already exists"));
        }
        let fns = self.load_library(shared, body)?;
        if fns.is_empty() {
            return Err("No functions registered".into());
        }
        for f in &fns {
            if existing.owner(&f.name).is_some_and(|owner| owner != name) {
                return Err(format!("Function {} already exists", f.name));
            }
        }
        let functions = fns.iter().map(|f| (f.name.clone(), f.meta.clone())).collect();
        Ok((Library { name, code: code.clone(), functions }, fns))
    }

    /// Rebuilds the registry and the compiled functions from the store's payload if it changed
    /// without this VM (a snapshot loaded, slots or a replica's copy arrived with libraries, or
    /// the VM started afresh). A library that does not load is left out, and logged.
    pub(super) fn sync_library(&mut self, shared: &Shared, payload: &Payload) {
        if self.library_generation == payload.generation {
            return;
        }
        self.library.clear();
        let mut registry = Registry { generation: payload.generation, ..Registry::default() };
        let codes = match rdb::verify(&payload.bytes) {
            Some((body, _)) => payload_codes(body).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the stored libraries do not read");
                Vec::new()
            }),
            None => Vec::new(),
        };
        for code in codes {
            match self.create(shared, &registry, &code, true) {
                Ok((lib, fns)) => {
                    registry.libs.insert(lib.name.clone(), lib);
                    self.add(fns);
                }
                Err(e) => tracing::warn!(error = %e, "a stored library did not load"),
            }
        }
        *shared.functions.lock() = registry;
        self.library_generation = payload.generation;
    }

    fn add(&mut self, fns: Vec<Registered>) {
        for f in fns {
            self.library.insert(
                f.name.to_ascii_lowercase(),
                Compiled { function: f.function, flags: engine_flags(f.meta.flags) },
            );
        }
    }

    /// Puts `libs` (and their compiled functions) into the registry, dropping `gone` first.
    fn commit(&mut self, registry: &mut Registry, gone: &[String], libs: Vec<(Library, Vec<Registered>)>) {
        for name in gone {
            if let Some(old) = registry.libs.remove(name) {
                for f in old.functions.keys() {
                    self.library.remove(&f.to_ascii_lowercase());
                }
            }
        }
        for (lib, fns) in libs {
            registry.libs.insert(lib.name.clone(), lib);
            self.add(fns);
        }
        registry.generation += 1;
    }
}

fn err(text: impl std::fmt::Display) -> Frame {
    F::error(format!("ERR {text}"))
}

fn syntax(args: &[Bytes]) -> Frame {
    err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
        String::from_utf8_lossy(&args[0])
    ))
}

/// A FUNCTION subcommand that changes or reads the libraries (`args` start at the
/// subcommand), on the script thread. The store's payload stays locked throughout, and a
/// change is written back to it (a new generation, which this VM already reflects).
pub(super) fn command(engine: &mut Engine, shared: &Shared, libraries: &Libraries, args: &[Bytes]) -> Frame {
    let mut payload = libraries.lock();
    engine.sync_library(shared, &payload);
    let before = shared.functions.lock().generation;
    let reply = subcommand(engine, shared, args);
    let mut registry = shared.functions.lock();
    if registry.generation != before {
        payload.bytes = if registry.libs.is_empty() { Bytes::new() } else { Bytes::from(registry.dump()) };
        payload.generation += 1;
        registry.generation = payload.generation;
        engine.library_generation = payload.generation;
    }
    reply
}

/// Whether Redis's command table flags this FUNCTION subcommand `denyoom` (LOAD and RESTORE:
/// refused while `maxmemory` is reached).
pub(super) fn denies_oom(args: &[Bytes]) -> bool {
    use shoal_wire::acl::commands::{REDIS_COMMANDS, flag, lookup};
    let Some(sub) = args.first() else { return false };
    let name = format!("function|{}", String::from_utf8_lossy(sub).to_ascii_lowercase());
    lookup(&name).is_some_and(|id| REDIS_COMMANDS[id].has_flag(flag::DENYOOM))
}

fn subcommand(engine: &mut Engine, shared: &Shared, args: &[Bytes]) -> Frame {
    let Some(sub) = args.first() else { return syntax(&[Bytes::from_static(b"")]) };
    match sub.to_ascii_lowercase().as_slice() {
        b"stats" => stats(shared),
        b"load" => load(engine, shared, args),
        b"delete" if args.len() == 2 => {
            let mut registry = shared.functions.lock();
            let name = String::from_utf8_lossy(&args[1]).into_owned();
            if !registry.libs.contains_key(&name) {
                return err("Library not found");
            }
            engine.commit(&mut registry, &[name], Vec::new());
            F::ok()
        }
        b"flush" => {
            if args.len() > 2 {
                return syntax(args);
            }
            if args.len() == 2
                && !args[1].eq_ignore_ascii_case(b"sync")
                && !args[1].eq_ignore_ascii_case(b"async")
            {
                return err("FUNCTION FLUSH only supports SYNC|ASYNC option");
            }
            let mut registry = shared.functions.lock();
            let all: Vec<String> = registry.libs.keys().cloned().collect();
            engine.commit(&mut registry, &all, Vec::new());
            F::ok()
        }
        b"list" => list(&shared.functions.lock(), args),
        b"dump" if args.len() == 1 => F::bulk(shared.functions.lock().dump()),
        b"restore" => restore(engine, shared, args),
        _ => syntax(args),
    }
}

fn load(engine: &mut Engine, shared: &Shared, args: &[Bytes]) -> Frame {
    let mut replace = false;
    let mut pos = 1;
    while pos + 1 < args.len() {
        if !args[pos].eq_ignore_ascii_case(b"replace") {
            return err(format!("Unknown option given: {}", String::from_utf8_lossy(&args[pos])));
        }
        replace = true;
        pos += 1;
    }
    let Some(code) = args.get(pos) else { return err("Function code is missing") };
    let existing = std::mem::take(&mut *shared.functions.lock());
    let created = engine.create(shared, &existing, code, replace);
    let mut registry = shared.functions.lock();
    *registry = existing;
    match created {
        Ok((lib, fns)) => {
            let name = lib.name.clone();
            engine.commit(&mut registry, std::slice::from_ref(&name), vec![(lib, fns)]);
            F::bulk(name)
        }
        Err(e) => err(e),
    }
}

fn list(registry: &Registry, args: &[Bytes]) -> Frame {
    let (mut with_code, mut pattern) = (false, None);
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        if !with_code && a.eq_ignore_ascii_case(b"withcode") {
            with_code = true;
        } else if pattern.is_none() && a.eq_ignore_ascii_case(b"libraryname") {
            if i + 1 >= args.len() {
                return err("library name argument was not given");
            }
            i += 1;
            pattern = Some(args[i].to_ascii_lowercase());
        } else {
            return err(format!("Unknown argument {}", String::from_utf8_lossy(a)));
        }
        i += 1;
    }
    let libs = registry.libs.values().filter(|l| {
        pattern
            .as_ref()
            .is_none_or(|p| shoal_wire::glob::glob_match(p, l.name.to_ascii_lowercase().as_bytes()))
    });
    F::array(
        libs.map(|l| {
            let functions = l
                .functions
                .iter()
                .map(|(name, m)| {
                    let flags = FLAG_NAMES
                        .iter()
                        .enumerate()
                        .filter(|(bit, _)| m.flags & (1 << bit) != 0)
                        .map(|(_, f)| F::status(f))
                        .collect();
                    F::map(vec![
                        F::bulk_from(b"name"),
                        F::bulk(name.clone()),
                        F::bulk_from(b"description"),
                        F::bulk_or_nil(m.desc.as_deref()),
                        F::bulk_from(b"flags"),
                        F::set(flags),
                    ])
                })
                .collect();
            let mut m = vec![
                F::bulk_from(b"library_name"),
                F::bulk(l.name.clone()),
                F::bulk_from(b"engine"),
                F::bulk_from(b"LUA"),
                F::bulk_from(b"functions"),
                F::array(functions),
            ];
            if with_code {
                m.extend([F::bulk_from(b"library_code"), F::bulk(l.code.clone())]);
            }
            F::map(m)
        })
        .collect(),
    )
}

fn restore(engine: &mut Engine, shared: &Shared, args: &[Bytes]) -> Frame {
    if args.len() < 2 || args.len() > 3 {
        return syntax(args);
    }
    let (mut replace, mut flush) = (false, false);
    if let Some(policy) = args.get(2) {
        match policy.to_ascii_lowercase().as_slice() {
            b"append" => {}
            b"replace" => replace = true,
            b"flush" => flush = true,
            _ => return err("Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."),
        }
    }
    let Some((body, _version)) = rdb::verify(&args[1]) else {
        return err("DUMP payload version or checksum are wrong");
    };
    let mut staged = Registry::default();
    let mut built = Vec::new();
    for code in payload_codes(body).map_err(err).into_iter().flatten() {
        match engine.create(shared, &staged, &code, false) {
            Ok((lib, fns)) => {
                staged.libs.insert(lib.name.clone(), lib.clone());
                built.push((lib, fns));
            }
            Err(e) => return err(e),
        }
    }
    if let Err(e) = payload_codes(body) {
        return err(e);
    }
    let mut registry = shared.functions.lock();
    let gone: Vec<String> = if flush {
        registry.libs.keys().cloned().collect()
    } else {
        let mut gone = Vec::new();
        for name in staged.libs.keys() {
            if registry.libs.contains_key(name) {
                if !replace {
                    return err(format!("Library {name} already exists"));
                }
                gone.push(name.clone());
            }
        }
        for (name, lib) in &staged.libs {
            for f in lib.functions.keys() {
                if registry.owner(f).is_some_and(|o| !gone.iter().any(|g| g == o) && o != name) {
                    return err(format!("Function {f} already exists"));
                }
            }
        }
        gone
    };
    engine.commit(&mut registry, &gone, built);
    F::ok()
}

/// FUNCTION STATS, answered beside the script thread: the function running now (if any) and
/// the counts.
pub fn stats(shared: &Shared) -> Frame {
    if let Some(running) = shared.running() {
        if !running.function {
            return F::error(super::shared::BUSY.into());
        }
        let command = F::array(running.command.iter().map(|a| F::bulk(a.clone())).collect());
        let running = F::map(vec![
            F::bulk_from(b"name"),
            F::bulk(running.name),
            F::bulk_from(b"command"),
            command,
            F::bulk_from(b"duration_ms"),
            F::int(running.duration_ms as i64),
        ]);
        return stats_frame(shared, running);
    }
    stats_frame(shared, F::nil())
}

fn stats_frame(shared: &Shared, running: Frame) -> Frame {
    let registry = shared.functions.lock();
    F::map(vec![
        F::bulk_from(b"running_script"),
        running,
        F::bulk_from(b"engines"),
        F::map(vec![
            F::bulk_from(b"LUA"),
            F::map(vec![
                F::bulk_from(b"libraries_count"),
                F::int(registry.libs.len() as i64),
                F::bulk_from(b"functions_count"),
                F::int(registry.function_count() as i64),
            ]),
        ]),
    ])
}
