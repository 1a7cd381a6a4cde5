CREATE TABLE stadium (stadium_id int PRIMARY KEY, location text, name text, capacity int, highest int, lowest int, average int);
CREATE TABLE singer (singer_id int PRIMARY KEY, name text, country text, song_name text, song_release_year text, age int, is_male bool);
CREATE TABLE concert (concert_id int PRIMARY KEY, concert_name text, theme text, stadium_id int REFERENCES stadium, year text);
INSERT INTO stadium VALUES (1,'Raith','Stark''s Park',10104,4812,1294,2106),(2,'Ayr','Somerset Park',11998,2363,1057,1477);
INSERT INTO singer VALUES (1,'Joe Sharp','Netherlands','You','1992',52,false),(2,'Timbaland','United States','Dangerous','2008',32,true),(3,'Justin Brown','France','Hey Oh','2013',29,true);
INSERT INTO concert VALUES (1,'Auditions','Free choice',1,'2014'),(2,'Super bootcamp','Free choice 2',2,'2014');
