-- huiyi database written by commit 5cf7836 (pre-Alembic); made by scripts/make_previous_release_fixture.py
CREATE TABLE audit_log (
	id INTEGER NOT NULL, 
	at DATETIME NOT NULL, 
	actor VARCHAR(200) NOT NULL, 
	action VARCHAR(32) NOT NULL, 
	namespace VARCHAR(260) NOT NULL, 
	memory_id VARCHAR, 
	detail VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "audit_log" VALUES(1,'2026-11-30 19:55:35.943117','admin:tg:1','link','default/tg:1001',NULL,'{"note": "迁移前 before migration"}');
CREATE TABLE chat_log (
	id INTEGER NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	chat VARCHAR(300) NOT NULL, 
	role VARCHAR(16) NOT NULL, 
	sender_id VARCHAR NOT NULL, 
	sender_name VARCHAR NOT NULL, 
	message_id VARCHAR NOT NULL, 
	text VARCHAR NOT NULL, 
	at DATETIME NOT NULL, 
	capture_ns VARCHAR(260) NOT NULL, 
	capture_queued DATETIME, 
	PRIMARY KEY (id)
);
INSERT INTO "chat_log" VALUES(1,'default','tg:private:1001','user','1001','小明','dm-0','你还记得我的猫吗？','2026-11-20 08:30:00.000000','',NULL);
INSERT INTO "chat_log" VALUES(2,'default','tg:private:1001','bot','bot','小桃','dm-1','当然记得，煤球！','2026-11-20 08:31:00.000000','',NULL);
INSERT INTO "chat_log" VALUES(3,'default','tg:private:1001','user','1001','小明','dm-2','Mixed 中英 text with emoji 😀 and ！？','2026-11-20 08:32:00.000000','',NULL);
INSERT INTO "chat_log" VALUES(4,'default','tg:group:-1009','user','1001','小明','g-1','明天见 see you','2026-11-20 09:30:00.000000','default/tg:1001','2026-11-30 19:55:35.928426');
CREATE TABLE chat_redactions (
	id INTEGER NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	chat VARCHAR(300) NOT NULL, 
	message_id VARCHAR(128) NOT NULL, 
	sender_id VARCHAR(128) NOT NULL, 
	at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_chat_redaction UNIQUE (tenant, chat, message_id, sender_id)
);
INSERT INTO "chat_redactions" VALUES(1,'default','tg:group:-1009','g-2','1001','2026-11-30 19:55:35.937174');
CREATE TABLE deliveries (
	"key" VARCHAR(600) NOT NULL, 
	processed_at DATETIME NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "deliveries" VALUES('default|tg|tg:private:1001|dm-0','2026-11-30 19:55:35.909822');
INSERT INTO "deliveries" VALUES('default|tg|tg:private:1001|dm-2','2026-11-30 19:55:35.922681');
INSERT INTO "deliveries" VALUES('default|tg|tg:group:-1009|g-1','2026-11-30 19:55:35.927708');
INSERT INTO "deliveries" VALUES('fp|default|tg|tg:group:-1009|0f0f0f','2026-11-30 19:55:35.942614');
CREATE TABLE identities (
	id INTEGER NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	platform_subject VARCHAR(200) NOT NULL, 
	subject VARCHAR(200) NOT NULL, 
	linked_at DATETIME NOT NULL, 
	actor VARCHAR(200) NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_identity UNIQUE (tenant, platform_subject)
);
INSERT INTO "identities" VALUES(1,'default','tg:1001','person:xiaoming','2026-11-30 19:55:35.943681','admin:tg:1');
INSERT INTO "identities" VALUES(2,'default','qq:10001','person:xiaoming','2026-11-30 19:55:35.943681','admin:tg:1');
CREATE TABLE index_outbox (
	id INTEGER NOT NULL, 
	namespace VARCHAR(260) NOT NULL, 
	memory_id VARCHAR(32) NOT NULL, 
	op VARCHAR(8) NOT NULL, 
	attempts INTEGER NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "index_outbox" VALUES(1,'default/tg:1001','a1b2c3d4e5f6','upsert',0,'2026-11-30 19:55:33.800704');
INSERT INTO "index_outbox" VALUES(2,'default/tg:1001','0123456789ab','upsert',0,'2026-11-30 19:55:35.842759');
INSERT INTO "index_outbox" VALUES(3,'default/tg:1001','feedfacecafe','upsert',0,'2026-11-30 19:55:35.843320');
INSERT INTO "index_outbox" VALUES(4,'default/qq:20002','c0ffee000001','upsert',0,'2026-11-30 19:55:35.843715');
INSERT INTO "index_outbox" VALUES(5,'default/qq:20002','deadbeef0002','upsert',0,'2026-11-30 19:55:35.844095');
INSERT INTO "index_outbox" VALUES(6,'default/tg:1001','0123456789ab','upsert',0,'2026-11-22 08:30:00.000000');
INSERT INTO "index_outbox" VALUES(7,'default/qq:20002','0badc0de0003','upsert',0,'2026-11-30 19:55:35.881451');
INSERT INTO "index_outbox" VALUES(8,'default/qq:20002','0badc0de0003','delete',0,'2026-11-30 19:55:35.889192');
INSERT INTO "index_outbox" VALUES(9,'default/tg:1001','5ec0e7000004','upsert',0,'2026-11-30 19:55:35.933947');
INSERT INTO "index_outbox" VALUES(10,'default/tg:1001','5ec0e7000004','delete',0,'2026-11-30 19:55:35.934443');
CREATE TABLE last_recall (
	namespace VARCHAR(260) NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	chat VARCHAR(300) NOT NULL, 
	at DATETIME NOT NULL, 
	k INTEGER NOT NULL, 
	fallback_reason VARCHAR NOT NULL, 
	entries VARCHAR NOT NULL, 
	PRIMARY KEY (namespace)
);
INSERT INTO "last_recall" VALUES('default/tg:1001','default','tg:private:1001','2026-11-20 08:32:00.000000',1,'','[{"id": "a1b2c3d4e5f6", "pos": 1, "score": 0.91, "ranks": {"bm25": 1}, "parts": null}]');
CREATE TABLE memories (
	id VARCHAR(32) NOT NULL, 
	namespace VARCHAR(260) NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	text VARCHAR NOT NULL, 
	norm VARCHAR NOT NULL, 
	category VARCHAR NOT NULL, 
	"key" VARCHAR(512) NOT NULL, 
	importance FLOAT NOT NULL, 
	valence FLOAT NOT NULL, 
	arousal FLOAT NOT NULL, 
	emotion VARCHAR NOT NULL, 
	origin VARCHAR NOT NULL, 
	visibility VARCHAR NOT NULL, 
	source_message_id VARCHAR, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	valid_from DATETIME NOT NULL, 
	event_time DATETIME, 
	version INTEGER NOT NULL, 
	access_times VARCHAR NOT NULL, 
	source_fp VARCHAR(64) NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_memories_namespace_key UNIQUE (namespace, "key")
);
INSERT INTO "memories" VALUES('a1b2c3d4e5f6','default/tg:1001','default','我养了一只叫煤球的猫🐈','我养了一只叫煤球的猫🐈','profile','pet:cat',0.5,0.0,0.0,'neutral','tg:private:1001','private','m-a1b2c3d4e5f6','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000',NULL,1,'["2026-11-20T08:30:00+00:00", "2026-11-23T08:30:00+00:00"]','');
INSERT INTO "memories" VALUES('0123456789ab','default/tg:1001','default','我現在改喝拿铁了','我现在改喝拿铁了','preference','drink',0.5,0.0,0.0,'neutral','tg:private:1001','private','m-0123456789ab','2026-11-20 08:30:00.000000','2026-11-22 08:30:00.000000','2026-11-22 08:30:00.000000',NULL,2,'["2026-11-20T08:30:00+00:00"]','fp-latte');
INSERT INTO "memories" VALUES('feedfacecafe','default/tg:1001','default','下周三要去杭州出差（出差！）','下周三要去杭州出差(出差!)','event','event:trip',0.5,0.0,0.0,'neutral','tg:group:-1009','group','m-feedfacecafe','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000',NULL,1,'["2026-11-20T08:30:00+00:00"]','');
INSERT INTO "memories" VALUES('c0ffee000001','default/qq:20002','default','I run 5 km every morning 🏃','i run 5 km every morning 🏃','routine','habit:run',0.5,0.0,0.0,'neutral','','private','m-c0ffee000001','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000',NULL,1,'["2026-11-20T08:30:00+00:00"]','');
INSERT INTO "memories" VALUES('deadbeef0002','default/qq:20002','default','My sister''s name is Lin 林','my sister''s name is lin 林','relationship','family:sister',0.5,0.0,0.0,'neutral','','private','m-deadbeef0002','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000','2026-11-20 08:30:00.000000',NULL,1,'["2026-11-20T08:30:00+00:00"]','');
CREATE TABLE memory_history (
	id INTEGER NOT NULL, 
	memory_id VARCHAR(32) NOT NULL, 
	namespace VARCHAR(260) NOT NULL, 
	version INTEGER NOT NULL, 
	text VARCHAR NOT NULL, 
	category VARCHAR NOT NULL, 
	"key" VARCHAR NOT NULL, 
	origin VARCHAR NOT NULL, 
	source_message_id VARCHAR, 
	source_fp VARCHAR(64) NOT NULL, 
	valid_from DATETIME NOT NULL, 
	valid_to DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "memory_history" VALUES(1,'0123456789ab','default/tg:1001',1,'我喜歡喝美式咖啡，不加糖。','preference','drink','tg:private:1001','m-0123456789ab','','2026-11-20 08:30:00.000000','2026-11-22 08:30:00.000000');
CREATE TABLE pending_confirmations (
	"key" VARCHAR(600) NOT NULL, 
	namespace VARCHAR(260) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "pending_confirmations" VALUES('default/qq:20002|forget-all|qq:20002','default/qq:20002','2026-11-24 08:30:00.000000');
CREATE TABLE tombstones (
	id INTEGER NOT NULL, 
	namespace VARCHAR(260) NOT NULL, 
	fingerprint VARCHAR(64) NOT NULL, 
	forgotten_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_tombstone UNIQUE (namespace, fingerprint)
);
INSERT INTO "tombstones" VALUES(1,'default/qq:20002','fp-cilantro','2026-11-30 19:55:35.889192');
INSERT INTO "tombstones" VALUES(2,'default/tg:1001','fp-rain','2026-11-30 19:55:35.934443');
CREATE INDEX ix_memories_namespace_updated ON memories (namespace, updated_at);
CREATE INDEX ix_memories_tenant ON memories (tenant);
CREATE INDEX ix_memories_namespace ON memories (namespace);
CREATE INDEX ix_memory_history_namespace ON memory_history (namespace);
CREATE INDEX ix_memory_history_memory_id ON memory_history (memory_id);
CREATE INDEX ix_tombstones_namespace ON tombstones (namespace);
CREATE INDEX ix_chat_log_capture_queued ON chat_log (capture_queued);
CREATE INDEX ix_chat_log_chat ON chat_log (tenant, chat, id);
CREATE INDEX ix_audit_log_action ON audit_log (action);
CREATE INDEX ix_audit_log_namespace ON audit_log (namespace);
CREATE INDEX ix_identities_subject ON identities (subject);
CREATE INDEX ix_last_recall_tenant ON last_recall (tenant);
CREATE INDEX ix_pending_confirmations_namespace ON pending_confirmations (namespace);
