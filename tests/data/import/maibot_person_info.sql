-- MaiBot's person_info table (src/common/database/database_model.py: PersonInfo), a few rows of our own.
-- points: a JSON list of [text, weight, "YYYY-MM-DD HH:MM:SS"] (MaiBot's relationship manager).
CREATE TABLE person_info (
    id INTEGER PRIMARY KEY, person_id VARCHAR(64) NOT NULL UNIQUE, person_name TEXT, name_reason TEXT,
    platform TEXT NOT NULL, user_id VARCHAR(64) NOT NULL, nickname TEXT NOT NULL, impression TEXT,
    short_impression TEXT, points TEXT, forgotten_points TEXT, info_list TEXT, know_times REAL,
    know_since REAL, last_know REAL, attitude INTEGER DEFAULT 50);
INSERT INTO person_info (id, person_id, person_name, platform, user_id, nickname, points, forgotten_points, know_times)
VALUES
 (1, 'a1b2', '小林', 'qq', '20001', '林林',
  '[["小林养了一只叫豆豆的柯基", 8.0, "2026-10-01 21:30:00"], ["小林最近在准备考研，压力很大", 6.0, "2026-10-03 23:10:00"], ["小林喜欢吃辣", 4.0, "2026-10-05 12:00:00"]]',
  '[["小林以前住在武汉", 2.0, "2026-09-01 10:00:00"]]', 12),
 (2, 'c3d4', 'Sam', 'qq', '20002', 'sammy',
  '[["Sam works night shifts at a bakery", 7.0, "2026-10-02 02:15:00"], ["", 1.0, "2026-10-02 02:16:00"], ["Sam is afraid of dogs", 5.0, "yesterday-ish"]]',
  NULL, 3),
 (3, 'e5f6', NULL, 'qq', '20003', '路人', 'not json at all', NULL, 1),
 (4, 'g7h8', '阿哲', 'qq', '20004', '阿哲', '[]', NULL, 0);
