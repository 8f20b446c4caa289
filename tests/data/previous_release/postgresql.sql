-- huiyi database written by commit 5cf7836 (pre-Alembic); made by scripts/make_previous_release_fixture.py
--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)


--
-- Name: __SCHEMA__; Type: SCHEMA; Schema: -; Owner: -
--





--
-- Name: audit_log; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.audit_log (
    id integer NOT NULL,
    at timestamp with time zone NOT NULL,
    actor character varying(200) NOT NULL,
    action character varying(32) NOT NULL,
    namespace character varying(260) NOT NULL,
    memory_id character varying,
    detail character varying NOT NULL
);


--
-- Name: audit_log_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.audit_log_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: audit_log_id_seq; Type: SEQUENCE OWNED BY; Schema: __SCHEMA__; Owner: -
--

ALTER SEQUENCE __SCHEMA__.audit_log_id_seq OWNED BY __SCHEMA__.audit_log.id;


--
-- Name: chat_log; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.chat_log (
    id integer NOT NULL,
    tenant character varying(64) NOT NULL,
    chat character varying(300) NOT NULL,
    role character varying(16) NOT NULL,
    sender_id character varying NOT NULL,
    sender_name character varying NOT NULL,
    message_id character varying NOT NULL,
    text character varying NOT NULL,
    at timestamp with time zone NOT NULL,
    capture_ns character varying(260) NOT NULL,
    capture_queued timestamp with time zone
);


--
-- Name: chat_log_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.chat_log_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: chat_log_id_seq; Type: SEQUENCE OWNED BY; Schema: __SCHEMA__; Owner: -
--

ALTER SEQUENCE __SCHEMA__.chat_log_id_seq OWNED BY __SCHEMA__.chat_log.id;


--
-- Name: chat_redactions; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.chat_redactions (
    id integer NOT NULL,
    tenant character varying(64) NOT NULL,
    chat character varying(300) NOT NULL,
    message_id character varying(128) NOT NULL,
    sender_id character varying(128) NOT NULL,
    at timestamp with time zone NOT NULL
);


--
-- Name: chat_redactions_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.chat_redactions_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: chat_redactions_id_seq; Type: SEQUENCE OWNED BY; Schema: __SCHEMA__; Owner: -
--

ALTER SEQUENCE __SCHEMA__.chat_redactions_id_seq OWNED BY __SCHEMA__.chat_redactions.id;


--
-- Name: deliveries; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.deliveries (
    key character varying(600) NOT NULL,
    processed_at timestamp with time zone NOT NULL
);


--
-- Name: identities; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.identities (
    id integer NOT NULL,
    tenant character varying(64) NOT NULL,
    platform_subject character varying(200) NOT NULL,
    subject character varying(200) NOT NULL,
    linked_at timestamp with time zone NOT NULL,
    actor character varying(200) NOT NULL
);


--
-- Name: identities_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.identities_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: identities_id_seq; Type: SEQUENCE OWNED BY; Schema: __SCHEMA__; Owner: -
--

ALTER SEQUENCE __SCHEMA__.identities_id_seq OWNED BY __SCHEMA__.identities.id;


--
-- Name: index_outbox; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.index_outbox (
    id integer NOT NULL,
    namespace character varying(260) NOT NULL,
    memory_id character varying(32) NOT NULL,
    op character varying(8) NOT NULL,
    attempts integer NOT NULL,
    created_at timestamp with time zone NOT NULL
);


--
-- Name: index_outbox_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.index_outbox_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: index_outbox_id_seq; Type: SEQUENCE OWNED BY; Schema: __SCHEMA__; Owner: -
--

ALTER SEQUENCE __SCHEMA__.index_outbox_id_seq OWNED BY __SCHEMA__.index_outbox.id;


--
-- Name: last_recall; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.last_recall (
    namespace character varying(260) NOT NULL,
    tenant character varying(64) NOT NULL,
    chat character varying(300) NOT NULL,
    at timestamp with time zone NOT NULL,
    k integer NOT NULL,
    fallback_reason character varying NOT NULL,
    entries character varying NOT NULL
);


--
-- Name: memories; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.memories (
    id character varying(32) NOT NULL,
    namespace character varying(260) NOT NULL,
    tenant character varying(64) NOT NULL,
    text character varying NOT NULL,
    norm character varying NOT NULL,
    category character varying NOT NULL,
    key character varying(512) NOT NULL,
    importance double precision NOT NULL,
    valence double precision NOT NULL,
    arousal double precision NOT NULL,
    emotion character varying NOT NULL,
    origin character varying NOT NULL,
    visibility character varying NOT NULL,
    source_message_id character varying,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    valid_from timestamp with time zone NOT NULL,
    event_time timestamp with time zone,
    version integer NOT NULL,
    access_times character varying NOT NULL,
    source_fp character varying(64) NOT NULL
);


--
-- Name: memory_history; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.memory_history (
    id integer NOT NULL,
    memory_id character varying(32) NOT NULL,
    namespace character varying(260) NOT NULL,
    version integer NOT NULL,
    text character varying NOT NULL,
    category character varying NOT NULL,
    key character varying NOT NULL,
    origin character varying NOT NULL,
    source_message_id character varying,
    source_fp character varying(64) NOT NULL,
    valid_from timestamp with time zone NOT NULL,
    valid_to timestamp with time zone NOT NULL
);


--
-- Name: memory_history_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.memory_history_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: memory_history_id_seq; Type: SEQUENCE OWNED BY; Schema: __SCHEMA__; Owner: -
--

ALTER SEQUENCE __SCHEMA__.memory_history_id_seq OWNED BY __SCHEMA__.memory_history.id;


--
-- Name: pending_confirmations; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.pending_confirmations (
    key character varying(600) NOT NULL,
    namespace character varying(260) NOT NULL,
    created_at timestamp with time zone NOT NULL
);


--
-- Name: tombstones; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.tombstones (
    id integer NOT NULL,
    namespace character varying(260) NOT NULL,
    fingerprint character varying(64) NOT NULL,
    forgotten_at timestamp with time zone NOT NULL
);


--
-- Name: tombstones_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

CREATE SEQUENCE __SCHEMA__.tombstones_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: tombstones_id_seq; Type: SEQUENCE OWNED BY; Schema: __SCHEMA__; Owner: -
--

ALTER SEQUENCE __SCHEMA__.tombstones_id_seq OWNED BY __SCHEMA__.tombstones.id;


--
-- Name: audit_log id; Type: DEFAULT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.audit_log ALTER COLUMN id SET DEFAULT nextval('__SCHEMA__.audit_log_id_seq'::regclass);


--
-- Name: chat_log id; Type: DEFAULT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.chat_log ALTER COLUMN id SET DEFAULT nextval('__SCHEMA__.chat_log_id_seq'::regclass);


--
-- Name: chat_redactions id; Type: DEFAULT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.chat_redactions ALTER COLUMN id SET DEFAULT nextval('__SCHEMA__.chat_redactions_id_seq'::regclass);


--
-- Name: identities id; Type: DEFAULT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.identities ALTER COLUMN id SET DEFAULT nextval('__SCHEMA__.identities_id_seq'::regclass);


--
-- Name: index_outbox id; Type: DEFAULT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.index_outbox ALTER COLUMN id SET DEFAULT nextval('__SCHEMA__.index_outbox_id_seq'::regclass);


--
-- Name: memory_history id; Type: DEFAULT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.memory_history ALTER COLUMN id SET DEFAULT nextval('__SCHEMA__.memory_history_id_seq'::regclass);


--
-- Name: tombstones id; Type: DEFAULT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tombstones ALTER COLUMN id SET DEFAULT nextval('__SCHEMA__.tombstones_id_seq'::regclass);


--
-- Data for Name: audit_log; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.audit_log VALUES (1, '2026-11-30 19:55:39.694251+00', 'admin:tg:1', 'link', 'default/tg:1001', NULL, '{"note": "迁移前 before migration"}');


--
-- Data for Name: chat_log; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.chat_log VALUES (1, 'default', 'tg:private:1001', 'user', '1001', '小明', 'dm-0', '你还记得我的猫吗？', '2026-11-20 08:30:00+00', '', NULL);
INSERT INTO __SCHEMA__.chat_log VALUES (2, 'default', 'tg:private:1001', 'bot', 'bot', '小桃', 'dm-1', '当然记得，煤球！', '2026-11-20 08:31:00+00', '', NULL);
INSERT INTO __SCHEMA__.chat_log VALUES (3, 'default', 'tg:private:1001', 'user', '1001', '小明', 'dm-2', 'Mixed 中英 text with emoji 😀 and ！？', '2026-11-20 08:32:00+00', '', NULL);
INSERT INTO __SCHEMA__.chat_log VALUES (4, 'default', 'tg:group:-1009', 'user', '1001', '小明', 'g-1', '明天见 see you', '2026-11-20 09:30:00+00', 'default/tg:1001', '2026-11-30 19:55:39.621021+00');


--
-- Data for Name: chat_redactions; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.chat_redactions VALUES (1, 'default', 'tg:group:-1009', 'g-2', '1001', '2026-11-30 19:55:39.668094+00');


--
-- Data for Name: deliveries; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.deliveries VALUES ('default|tg|tg:private:1001|dm-0', '2026-11-30 19:55:39.558528+00');
INSERT INTO __SCHEMA__.deliveries VALUES ('default|tg|tg:private:1001|dm-2', '2026-11-30 19:55:39.593217+00');
INSERT INTO __SCHEMA__.deliveries VALUES ('default|tg|tg:group:-1009|g-1', '2026-11-30 19:55:39.617987+00');
INSERT INTO __SCHEMA__.deliveries VALUES ('fp|default|tg|tg:group:-1009|0f0f0f', '2026-11-30 19:55:39.686043+00');


--
-- Data for Name: identities; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.identities VALUES (1, 'default', 'tg:1001', 'person:xiaoming', '2026-11-30 19:55:39.701969+00', 'admin:tg:1');
INSERT INTO __SCHEMA__.identities VALUES (2, 'default', 'qq:10001', 'person:xiaoming', '2026-11-30 19:55:39.701969+00', 'admin:tg:1');


--
-- Data for Name: index_outbox; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.index_outbox VALUES (1, 'default/tg:1001', 'a1b2c3d4e5f6', 'upsert', 0, '2026-11-30 19:55:38.006249+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (2, 'default/tg:1001', '0123456789ab', 'upsert', 0, '2026-11-30 19:55:39.388776+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (3, 'default/tg:1001', 'feedfacecafe', 'upsert', 0, '2026-11-30 19:55:39.408546+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (4, 'default/qq:20002', 'c0ffee000001', 'upsert', 0, '2026-11-30 19:55:39.412986+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (5, 'default/qq:20002', 'deadbeef0002', 'upsert', 0, '2026-11-30 19:55:39.425361+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (6, 'default/tg:1001', '0123456789ab', 'upsert', 0, '2026-11-22 08:30:00+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (7, 'default/qq:20002', '0badc0de0003', 'upsert', 0, '2026-11-30 19:55:39.513751+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (8, 'default/qq:20002', '0badc0de0003', 'delete', 0, '2026-11-30 19:55:39.521897+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (9, 'default/tg:1001', '5ec0e7000004', 'upsert', 0, '2026-11-30 19:55:39.637999+00');
INSERT INTO __SCHEMA__.index_outbox VALUES (10, 'default/tg:1001', '5ec0e7000004', 'delete', 0, '2026-11-30 19:55:39.653679+00');


--
-- Data for Name: last_recall; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.last_recall VALUES ('default/tg:1001', 'default', 'tg:private:1001', '2026-11-20 08:32:00+00', 1, '', '[{"id": "a1b2c3d4e5f6", "pos": 1, "score": 0.91, "ranks": {"bm25": 1}, "parts": null}]');


--
-- Data for Name: memories; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.memories VALUES ('feedfacecafe', 'default/tg:1001', 'default', '下周三要去杭州出差（出差！）', '下周三要去杭州出差(出差!)', 'event', 'event:trip', 0.5, 0, 0, 'neutral', 'tg:group:-1009', 'group', 'm-feedfacecafe', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', NULL, 1, '["2026-11-20T08:30:00+00:00"]', '');
INSERT INTO __SCHEMA__.memories VALUES ('c0ffee000001', 'default/qq:20002', 'default', 'I run 5 km every morning 🏃', 'i run 5 km every morning 🏃', 'routine', 'habit:run', 0.5, 0, 0, 'neutral', '', 'private', 'm-c0ffee000001', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', NULL, 1, '["2026-11-20T08:30:00+00:00"]', '');
INSERT INTO __SCHEMA__.memories VALUES ('deadbeef0002', 'default/qq:20002', 'default', 'My sister''s name is Lin 林', 'my sister''s name is lin 林', 'relationship', 'family:sister', 0.5, 0, 0, 'neutral', '', 'private', 'm-deadbeef0002', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', NULL, 1, '["2026-11-20T08:30:00+00:00"]', '');
INSERT INTO __SCHEMA__.memories VALUES ('0123456789ab', 'default/tg:1001', 'default', '我現在改喝拿铁了', '我现在改喝拿铁了', 'preference', 'drink', 0.5, 0, 0, 'neutral', 'tg:private:1001', 'private', 'm-0123456789ab', '2026-11-20 08:30:00+00', '2026-11-22 08:30:00+00', '2026-11-22 08:30:00+00', NULL, 2, '["2026-11-20T08:30:00+00:00"]', 'fp-latte');
INSERT INTO __SCHEMA__.memories VALUES ('a1b2c3d4e5f6', 'default/tg:1001', 'default', '我养了一只叫煤球的猫🐈', '我养了一只叫煤球的猫🐈', 'profile', 'pet:cat', 0.5, 0, 0, 'neutral', 'tg:private:1001', 'private', 'm-a1b2c3d4e5f6', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', '2026-11-20 08:30:00+00', NULL, 1, '["2026-11-20T08:30:00+00:00", "2026-11-23T08:30:00+00:00"]', '');


--
-- Data for Name: memory_history; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.memory_history VALUES (1, '0123456789ab', 'default/tg:1001', 1, '我喜歡喝美式咖啡，不加糖。', 'preference', 'drink', 'tg:private:1001', 'm-0123456789ab', '', '2026-11-20 08:30:00+00', '2026-11-22 08:30:00+00');


--
-- Data for Name: pending_confirmations; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.pending_confirmations VALUES ('default/qq:20002|forget-all|qq:20002', 'default/qq:20002', '2026-11-24 08:30:00+00');


--
-- Data for Name: tombstones; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.tombstones VALUES (1, 'default/qq:20002', 'fp-cilantro', '2026-11-30 19:55:39.521897+00');
INSERT INTO __SCHEMA__.tombstones VALUES (2, 'default/tg:1001', 'fp-rain', '2026-11-30 19:55:39.653679+00');


--
-- Name: audit_log_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.audit_log_id_seq', 1, true);


--
-- Name: chat_log_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.chat_log_id_seq', 5, true);


--
-- Name: chat_redactions_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.chat_redactions_id_seq', 1, true);


--
-- Name: identities_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.identities_id_seq', 2, true);


--
-- Name: index_outbox_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.index_outbox_id_seq', 10, true);


--
-- Name: memory_history_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.memory_history_id_seq', 1, true);


--
-- Name: tombstones_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.tombstones_id_seq', 2, true);


--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);


--
-- Name: chat_log chat_log_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.chat_log
    ADD CONSTRAINT chat_log_pkey PRIMARY KEY (id);


--
-- Name: chat_redactions chat_redactions_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.chat_redactions
    ADD CONSTRAINT chat_redactions_pkey PRIMARY KEY (id);


--
-- Name: deliveries deliveries_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.deliveries
    ADD CONSTRAINT deliveries_pkey PRIMARY KEY (key);


--
-- Name: identities identities_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.identities
    ADD CONSTRAINT identities_pkey PRIMARY KEY (id);


--
-- Name: index_outbox index_outbox_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.index_outbox
    ADD CONSTRAINT index_outbox_pkey PRIMARY KEY (id);


--
-- Name: last_recall last_recall_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.last_recall
    ADD CONSTRAINT last_recall_pkey PRIMARY KEY (namespace);


--
-- Name: memories memories_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.memories
    ADD CONSTRAINT memories_pkey PRIMARY KEY (id);


--
-- Name: memory_history memory_history_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.memory_history
    ADD CONSTRAINT memory_history_pkey PRIMARY KEY (id);


--
-- Name: pending_confirmations pending_confirmations_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.pending_confirmations
    ADD CONSTRAINT pending_confirmations_pkey PRIMARY KEY (key);


--
-- Name: tombstones tombstones_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tombstones
    ADD CONSTRAINT tombstones_pkey PRIMARY KEY (id);


--
-- Name: chat_redactions uq_chat_redaction; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.chat_redactions
    ADD CONSTRAINT uq_chat_redaction UNIQUE (tenant, chat, message_id, sender_id);


--
-- Name: identities uq_identity; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.identities
    ADD CONSTRAINT uq_identity UNIQUE (tenant, platform_subject);


--
-- Name: memories uq_memories_namespace_key; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.memories
    ADD CONSTRAINT uq_memories_namespace_key UNIQUE (namespace, key);


--
-- Name: tombstones uq_tombstone; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.tombstones
    ADD CONSTRAINT uq_tombstone UNIQUE (namespace, fingerprint);


--
-- Name: ix_audit_log_action; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_audit_log_action ON __SCHEMA__.audit_log USING btree (action);


--
-- Name: ix_audit_log_namespace; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_audit_log_namespace ON __SCHEMA__.audit_log USING btree (namespace);


--
-- Name: ix_chat_log_capture_queued; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_chat_log_capture_queued ON __SCHEMA__.chat_log USING btree (capture_queued);


--
-- Name: ix_chat_log_chat; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_chat_log_chat ON __SCHEMA__.chat_log USING btree (tenant, chat, id);


--
-- Name: ix_identities_subject; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_identities_subject ON __SCHEMA__.identities USING btree (subject);


--
-- Name: ix_last_recall_tenant; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_last_recall_tenant ON __SCHEMA__.last_recall USING btree (tenant);


--
-- Name: ix_memories_namespace; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_memories_namespace ON __SCHEMA__.memories USING btree (namespace);


--
-- Name: ix_memories_namespace_updated; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_memories_namespace_updated ON __SCHEMA__.memories USING btree (namespace, updated_at);


--
-- Name: ix_memories_tenant; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_memories_tenant ON __SCHEMA__.memories USING btree (tenant);


--
-- Name: ix_memory_history_memory_id; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_memory_history_memory_id ON __SCHEMA__.memory_history USING btree (memory_id);


--
-- Name: ix_memory_history_namespace; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_memory_history_namespace ON __SCHEMA__.memory_history USING btree (namespace);


--
-- Name: ix_pending_confirmations_namespace; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_pending_confirmations_namespace ON __SCHEMA__.pending_confirmations USING btree (namespace);


--
-- Name: ix_tombstones_namespace; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX ix_tombstones_namespace ON __SCHEMA__.tombstones USING btree (namespace);


--
-- PostgreSQL database dump complete
--


