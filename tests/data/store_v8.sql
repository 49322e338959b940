-- A run store at schema version 8, as the code of commit 8574935 wrote it (PRAGMA
-- user_version = 8 is set by the test): see tests/test_store.py, test_a_v8_store_migrates_and_reads_as_it_did.
BEGIN TRANSACTION;
CREATE TABLE approvals (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            task_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            tool TEXT NOT NULL,
            args TEXT,
            rule TEXT,
            source TEXT NOT NULL DEFAULT 'plan',
            asked_at REAL NOT NULL,
            state TEXT NOT NULL,
            decision TEXT,
            decided_by TEXT,
            decided_at REAL,
            reason TEXT,
            edit_args TEXT,
            used_at REAL,
            note TEXT,
            PRIMARY KEY (run_id, task_id, seq)
        ) WITHOUT ROWID;
CREATE TABLE run_plans (
            run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
            plan TEXT NOT NULL
        );
INSERT INTO "run_plans" VALUES('0123456789ab','["every shape",[["text","t",{"q":"text"},[]],["nested","t",{"q":"nested"},[]],["numbers","t",{"q":"numbers"},[]],["scalar-null-string","t",{"q":"scalar-null-string"},[]],["none-output","t",{"q":"none-output"},[]],["when","t",{"q":"when"},[]],["opaque","t",{"q":"opaque"},[]],["boom","t",{"q":"boom"},[]],["cancelled-with-output","t",{"q":"cancelled-with-output"},[]],["skipped","t",{"q":"skipped"},[]],["agent","t",{"q":"agent"},[]],["secret","t",{"q":"secret"},[]],["m","t",{"q":"m"},[]],["nan","t",{"q":"nan"},[]],["last","t",{"q":"last"},[]]]]');
INSERT INTO "run_plans" VALUES('0123456789ac','["every shape",[["text","t",{"q":"text"},[]],["nested","t",{"q":"nested"},[]],["numbers","t",{"q":"numbers"},[]],["scalar-null-string","t",{"q":"scalar-null-string"},[]],["none-output","t",{"q":"none-output"},[]],["when","t",{"q":"when"},[]],["opaque","t",{"q":"opaque"},[]],["boom","t",{"q":"boom"},[]],["cancelled-with-output","t",{"q":"cancelled-with-output"},[]],["skipped","t",{"q":"skipped"},[]],["agent","t",{"q":"agent"},[]],["secret","t",{"q":"secret"},[]],["m","t",{"q":"m"},[]],["nan","t",{"q":"nan"},[]],["last","t",{"q":"last"},[]]]]');
INSERT INTO "run_plans" VALUES('f89ae2799860','{"goal":"map","tasks":[{"id":"ns","tool":"double","args":{"n":1}},{"id":"each","tool":"double","args":{"n":"${@item}"},"retries":1,"for_each":[1,2,3]},{"id":"in","tool":"login","args":{"user":"ann","password":"secret-pw"}}]}');
INSERT INTO "run_plans" VALUES('8a1195e0c2d2','["plain",[["t0","double",{"n":0},[]],["t1","double",{"n":1},["t0"]],["t2","double",{"n":2},["t1"]],["t3","double",{"n":3},["t2"]],["t4","double",{"n":4},["t3"]]]]');
CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            parent_id TEXT,
            created REAL NOT NULL,
            goal TEXT NOT NULL DEFAULT '',
            plan TEXT NOT NULL,
            n_tasks INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL,
            executor TEXT NOT NULL DEFAULT '',
            started_at REAL,
            finished_at REAL,
            critical_path TEXT,
            critical_path_s REAL,
            pid INTEGER
        , context TEXT);
INSERT INTO "runs" VALUES('00000000abcd',NULL,1.0,'old','{"goal": "old", "tasks": [{"id": "a", "tool": "echo", "args": {"value": 1}}]}',1,'succeeded','levels',1.0,2.0,NULL,NULL,NULL,NULL);
INSERT INTO "runs" VALUES('0123456789ab',NULL,1.79661323122726607325e+09,'every shape','',15,'failed','dataflow',1.79661323122726607325e+09,1.79661323322726607324e+09,NULL,NULL,11113,NULL);
INSERT INTO "runs" VALUES('0123456789ac',NULL,1.79661323126041555398e+09,'every shape','',15,'failed','dataflow',1.79661323126041555398e+09,1.79661323326041555406e+09,NULL,NULL,11113,NULL);
INSERT INTO "runs" VALUES('f89ae2799860',NULL,1.79661323147800755495e+09,'map','',3,'succeeded','serial',1.7966132314864459038e+09,1.79661323148783087736e+09,'["each"]',5.70774078369140625e-04,11113,NULL);
INSERT INTO "runs" VALUES('8a1195e0c2d2',NULL,1.79661323149494934082e+09,'plain','',5,'succeeded','dataflow',1.79661323150475621228e+09,1.79661323150628018377e+09,'["t0","t1","t2","t3","t4"]',1.2414455413818359375e-03,11113,NULL);
CREATE TABLE solve_rounds (
            solve_id TEXT NOT NULL REFERENCES solves (id) ON DELETE CASCADE,
            round INTEGER NOT NULL,
            run_id TEXT,
            outcome TEXT NOT NULL,
            reason TEXT,
            decision TEXT,
            feedback TEXT,
            at REAL NOT NULL,
            PRIMARY KEY (solve_id, round)
        ) WITHOUT ROWID;
CREATE TABLE solves (
            id TEXT PRIMARY KEY,
            goal TEXT NOT NULL,
            created REAL NOT NULL,
            status TEXT NOT NULL,
            reason TEXT,
            answer TEXT,
            cites TEXT,
            run_id TEXT,
            usage TEXT,
            finished_at REAL,
            pid INTEGER
        , options TEXT);
CREATE TABLE task_log (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            kind INTEGER NOT NULL,
            n INTEGER NOT NULL,
            doc TEXT NOT NULL CHECK (json_valid(doc))
        );
INSERT INTO "task_log" VALUES(1,'0123456789ab',1,4,'[["boom","failed",null,"RuntimeError: it broke","RuntimeError",3,1796000000.6948853,1796000001.45679,{"q":"boom"},null,"Traceback (most recent call last):\nRuntimeError: it broke"],["cancelled-with-output","cancelled",null,"stopped",null,1,1796000003.1234567,1796000007.1234567,{"q":"cancelled-with-output"},null,null],["skipped","skipped",null,null,null,0,null,null,null,null,null],["agent","succeeded","answer",null,null,1,1796000000.8377423,1796000001.7901235,"do",[{"step":1,"thought":"think","answer":"answer"}],null]]');
INSERT INTO "task_log" VALUES(2,'0123456789ab',0,7,'[["text","é   ☃ 𝄞 \"quoted\" back\\slash \u0001 tab\t",1,1796000000.6948853,1796000001.45679,{"q":"text"}],["nested",{"a":[1,2.5,null,true,{"b":"c"}],"":{}},1,1796000000.9805996,1796000002.1234567,{"q":"nested"}],["numbers",[1180591620717411303424,-0.0,1e+300,0.1,1796105097.2395256,-7],1,1796000001.1234567,1796000002.45679,{"q":"numbers"}],["scalar-null-string","null",1,1796000002.6948853,1796000006.1234567,{"q":"scalar-null-string"}],["none-output",null,1,1796000001.6948853,1796000003.7901235,{"q":"none-output"}],["when","2026-12-01T06:00:00Z",1,1796000000.6948853,1796000001.45679,{"q":"when"}],["opaque","<opaque thing>",1,1796000000.9805996,1796000002.1234567,{"q":"opaque"}]]');
INSERT INTO "task_log" VALUES(3,'0123456789ac',0,7,'[["text","é   ☃ 𝄞 \"quoted\" back\\slash \u0001 tab\t",1,1796000000.6948853,1796000001.45679,{"q":"text"}],["nested",{"a":[1,2.5,null,true,{"b":"c"}],"":{}},1,1796000000.9805996,1796000002.1234567,{"q":"nested"}],["numbers",[1180591620717411303424,-0.0,1e+300,0.1,1796105097.2395256,-7],1,1796000001.1234567,1796000002.45679,{"q":"numbers"}],["scalar-null-string","null",1,1796000002.6948853,1796000006.1234567,{"q":"scalar-null-string"}],["none-output",null,1,1796000001.6948853,1796000003.7901235,{"q":"none-output"}],["when","2026-12-01T06:00:00Z",1,1796000000.6948853,1796000001.45679,{"q":"when"}],["opaque","<opaque thing>",1,1796000000.9805996,1796000002.1234567,{"q":"opaque"}]]');
INSERT INTO "task_log" VALUES(4,'f89ae2799860',0,1,'[["ns",2,1,1796613231.4865685,1796613231.4871168,{"n":1}]]');
INSERT INTO "task_log" VALUES(5,'8a1195e0c2d2',0,5,'[["t0",0,1,1796613231.5049262,1796613231.5059543,{"n":0}],["t1",2,1,1796613231.5059748,1796613231.506038,{"n":1}],["t2",4,1,1796613231.5060441,1796613231.506105,{"n":2}],["t3",6,1,1796613231.506111,1796613231.5061555,{"n":3}],["t4",8,1,1796613231.5061615,1796613231.5062063,{"n":4}]]');
CREATE TABLE "task_rows" (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            task_id TEXT NOT NULL,
            status TEXT NOT NULL,
            output TEXT,
            error TEXT,
            error_type TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            started_at REAL,
            finished_at REAL,
            args TEXT,
            steps TEXT,
            decisions TEXT, traceback TEXT, elements TEXT,
            PRIMARY KEY (run_id, task_id)
        ) WITHOUT ROWID;
INSERT INTO "task_rows" VALUES('00000000abcd','a','succeeded','1',NULL,NULL,1,1.0,2.0,'{"value": 1}',NULL,NULL,NULL,NULL);
INSERT INTO "task_rows" VALUES('0123456789ab','last','succeeded','[1,"two"]',NULL,NULL,1,1.79600000069488525394e+09,1796000001.45679,'{"q":"last"}',NULL,NULL,NULL,NULL);
INSERT INTO "task_rows" VALUES('0123456789ab','m','succeeded','[{"x":1}]',NULL,NULL,1,1.79600000026631379133e+09,1796000000.45679,NULL,NULL,NULL,NULL,'[{"task_id":"m[0]","status":"succeeded","output":"{\"x\":1}","error":null,"error_type":null,"attempts":1,"started_at":1796000000.6948853,"finished_at":1796000001.45679,"args":"{\"q\":\"m[0]\"}","steps":null,"decisions":null,"traceback":null}]');
INSERT INTO "task_rows" VALUES('0123456789ab','nan','succeeded','NaN',NULL,NULL,1,1.79600000055202817911e+09,1.79600000112345671654e+09,'{"q":"nan"}',NULL,NULL,NULL,NULL);
INSERT INTO "task_rows" VALUES('0123456789ab','secret','succeeded','"ok"',NULL,NULL,1,1.79600000098059964185e+09,1.79600000212345671654e+09,'{"key":"***"}',NULL,'[{"tool":"t","decision":"redact","decided_by":"redacting","reason":null,"args":{"key":"***"},"at":1796000000.1234567,"rule":null,"source":"plan"}]',NULL,NULL);
INSERT INTO "task_rows" VALUES('f89ae2799860','each','succeeded','[2,4,6]',NULL,NULL,1,1.79661323148713541033e+09,1.79661323148770618431e+09,'[1,2,3]',NULL,NULL,NULL,'[{"task_id":"each[0]","status":"succeeded","output":"2","error":null,"error_type":null,"attempts":1,"started_at":1796613231.4872859,"finished_at":1796613231.4875255,"args":"{\"n\":1}","steps":null,"decisions":null,"traceback":null},{"task_id":"each[1]","status":"succeeded","output":"4","error":null,"error_type":null,"attempts":1,"started_at":1796613231.4875333,"finished_at":1796613231.487596,"args":"{\"n\":2}","steps":null,"decisions":null,"traceback":null},{"task_id":"each[2]","status":"succeeded","output":"6","error":null,"error_type":null,"attempts":1,"started_at":1796613231.487599,"finished_at":1796613231.487662,"args":"{\"n\":3}","steps":null,"decisions":null,"traceback":null}]');
INSERT INTO "task_rows" VALUES('f89ae2799860','in','succeeded','"hello ann"',NULL,NULL,1,1.79661323148771166803e+09,1.79661323148779964453e+09,'{"user":"ann","password":"[redacted]"}',NULL,'[{"tool":"login","decision":"redact","decided_by":"redacting","reason":"redacted: password","args":{"user":"ann","password":"[redacted]"},"at":1796613231.4877355,"rule":null,"source":"plan"}]',NULL,NULL);
CREATE INDEX runs_by_created ON runs (created);
CREATE INDEX runs_by_parent ON runs (parent_id);
CREATE INDEX solve_rounds_by_run ON solve_rounds (run_id);
CREATE INDEX approvals_by_state ON approvals (state, run_id);
CREATE INDEX task_log_by_run ON task_log (run_id);
CREATE VIEW task_log_rows (run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, args, steps, decisions, traceback, elements) AS SELECT l.run_id, json_extract(j.value, '$[0]'), 'succeeded', nullif(substr(json_remove(j.value, '$[5]', '$[4]', '$[3]', '$[2]', '$[0]'), 2, length(json_remove(j.value, '$[5]', '$[4]', '$[3]', '$[2]', '$[0]')) - 2), 'null'), NULL, NULL, json_extract(j.value, '$[2]'), CAST(json_extract(j.value, '$[3]') AS REAL), CAST(json_extract(j.value, '$[4]') AS REAL), nullif(substr(json_remove(j.value, '$[4]', '$[3]', '$[2]', '$[1]', '$[0]'), 2, length(json_remove(j.value, '$[4]', '$[3]', '$[2]', '$[1]', '$[0]')) - 2), 'null'), NULL, NULL, NULL, NULL FROM task_log AS l, json_each(l.doc) AS j WHERE l.kind = 0 UNION ALL SELECT l.run_id, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'), nullif(substr(json_remove(j.value, '$[10]', '$[9]', '$[8]', '$[7]', '$[6]', '$[5]', '$[4]', '$[3]', '$[1]', '$[0]'), 2, length(json_remove(j.value, '$[10]', '$[9]', '$[8]', '$[7]', '$[6]', '$[5]', '$[4]', '$[3]', '$[1]', '$[0]')) - 2), 'null'), json_extract(j.value, '$[3]'), json_extract(j.value, '$[4]'), json_extract(j.value, '$[5]'), CAST(json_extract(j.value, '$[6]') AS REAL), CAST(json_extract(j.value, '$[7]') AS REAL), nullif(substr(json_remove(j.value, '$[10]', '$[9]', '$[7]', '$[6]', '$[5]', '$[4]', '$[3]', '$[2]', '$[1]', '$[0]'), 2, length(json_remove(j.value, '$[10]', '$[9]', '$[7]', '$[6]', '$[5]', '$[4]', '$[3]', '$[2]', '$[1]', '$[0]')) - 2), 'null'), nullif(substr(json_remove(j.value, '$[10]', '$[8]', '$[7]', '$[6]', '$[5]', '$[4]', '$[3]', '$[2]', '$[1]', '$[0]'), 2, length(json_remove(j.value, '$[10]', '$[8]', '$[7]', '$[6]', '$[5]', '$[4]', '$[3]', '$[2]', '$[1]', '$[0]')) - 2), 'null'), NULL, json_extract(j.value, '$[10]'), NULL FROM task_log AS l, json_each(l.doc) AS j WHERE l.kind = 1;
CREATE VIEW tasks (run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, args, steps, decisions, traceback, elements) AS SELECT run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, args, steps, decisions, traceback, elements FROM task_rows UNION ALL SELECT run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, args, steps, decisions, traceback, elements FROM task_log_rows;
COMMIT;
